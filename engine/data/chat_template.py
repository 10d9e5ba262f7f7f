# Renders a model's own Jinja chat template exactly as transformers' apply_chat_template does, for
# Spillway's worker and GUI (engine/data/chat-template-jinja.cpp starts it; one process renders a
# whole dataset). Installed as share/spillway/chat_template.py; needs python3 and python3-jinja2.
#
# The environment mirrors transformers (utils/chat_template_utils.py, _compile_jinja_template and
# render_jinja_template; tokenization_utils_base.apply_chat_template): ImmutableSandboxedEnvironment
# with trim_blocks, lstrip_blocks, the `generation` tag (AssistantTracker) and loopcontrols; its
# tojson filter, raise_exception, strftime_now, dict and namespace; messages with None-valued keys
# dropped; reasoning fields aliased; the special tokens as variables.
#
# Protocol, one JSON object a line on stdin and stdout:
#   first line  {"template": SOURCE, "variables": {"bos_token": ..., ...}}
#          ->   {"ok": true, "generation": BOOL} or {"error": MESSAGE, "template_line": N}
#   then        {"messages": [...], "tools": [...]?, "add_generation_prompt": BOOL}
#          ->   {"text": TEXT, "trained": [[START, END], ...]} or {"error": MESSAGE, "template_line": N}
# Offsets count Unicode code points of TEXT (Python string indices). Trained spans are the
# assistant turns: the template's {% generation %} blocks when it has them, else each assistant
# message from the end of the prompt that asks for it (the rendering of the messages before it
# with add_generation_prompt=True) to the end of the template's closing token after it
# (<|im_end|>, <|eot_id|>, </s>: what the model must learn to write to end its turn); the
# whitespace after that token is not trained. Templates that open the reply in the generation
# prompt (<think>), close the last message otherwise than an earlier one, or rewrite earlier turns
# as the conversation grows (Qwen3's reasoning) are handled in prompt_end and turn_span; where the
# turn cannot be told apart, the reply is {"error": "cannot tell the trained tokens: ..."}.
#
# The script reads nothing but stdin, writes nothing but stdout, and opens no connection: after
# its imports, file creation is capped at zero bytes and sockets are refused.
import json
import re
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write(
        "spillway: rendering a model's chat template needs Python's jinja2; "
        "install the Debian package python3-jinja2 (apt install python3-jinja2)\n")
    sys.exit(3)


def _lock_down():
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:
        import socket

        def refused(*args, **kwargs):
            raise OSError("the chat template renderer opens no connection")

        socket.socket = refused
        socket.create_connection = refused
    except ImportError:
        pass


class AssistantTracker(Extension):
    # transformers' AssistantTracker: records the character span of each {% generation %} block.
    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._tracking = ContextVar("assistant_tracker", default=None)

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [],
                                      body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        tracking = self._tracking.get()
        if tracking is not None:
            rendered_blocks, generation_indices = tracking
            start_index = len("".join(rendered_blocks))
            generation_indices.append((start_index, start_index + len(rv)))
        return rv

    @contextmanager
    def activate_tracker(self, rendered_blocks, generation_indices):
        token = self._tracking.set((rendered_blocks, generation_indices))
        try:
            yield
        finally:
            self._tracking.reset(token)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


class TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, but "
                f"got {name!r}. Please rename the attribute.")


def compile_template(source):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(source)


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def normalize(messages):
    # _normalize_chat_messages (keys whose value is None dropped) then _alias_reasoning_fields.
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError(f"a message must be a JSON object, got {json.dumps(m)[:80]}")
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def template_line(error):
    # jinja2 rewrites the traceback so that template frames name "<template>" with the
    # template's own line numbers; the innermost one is where the error was raised.
    if isinstance(error, jinja2.exceptions.TemplateSyntaxError):
        return error.lineno
    line = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class Renderer:
    def __init__(self, source, variables):
        self.template = compile_template(source)
        self.generation = re.search(r"\{\%-?\s*generation\s*-?\%\}", source) is not None
        self.variables = {k: v for k, v in variables.items() if v is not None}

    def render(self, messages, tools, add_generation_prompt, spans=None):
        kwargs = dict(self.variables)
        kwargs.update(messages=messages, tools=tools, documents=None,
                      add_generation_prompt=add_generation_prompt)
        if spans is None:
            return self.template.render(**kwargs)
        blocks = []
        with self.template.environment.activate_tracker(blocks, spans):
            for block in self.template.generate(**kwargs):
                blocks.append(block)
        return "".join(blocks)

    def trained_spans(self, messages, tools, text):
        spans = []
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            span = self.turn_span(messages, tools, text, i, spans[-1][1] if spans else 0)
            if span is None:
                continue
            start, end = span
            if spans and start < spans[-1][1]:
                raise SpanError(f"assistant message {i + 1} starts inside the turn before it")
            spans.append([start, end])
        return spans

    def closing_token(self, last):
        # The token the template closes an assistant turn with (<|im_end|>, <|eot_id|>, " </s>",
        # <end_of_turn>): what it writes right after the reply in a probe conversation, where the
        # reply is the last message or is followed by a user's (gpt-oss closes the last with
        # <|return|>, the others with <|end|>). None when it writes no such token or the probe
        # does not render.
        if not hasattr(self, "_closing"):
            self._closing = {}
            for at_end in (True, False):
                probe = [{"role": "user", "content": "\ue001"},
                         {"role": "assistant", "content": "\ue000"}]
                if not at_end:
                    probe.append({"role": "user", "content": "\ue002"})
                try:
                    text = self.render(probe, None, False)
                    match = re.match(r"\s*<[^<>\s]+>", text[text.index("\ue000") + 1:])
                    self._closing[at_end] = match.group(0) if match else None
                except Exception:
                    self._closing[at_end] = None
        return self._closing[last]

    def prompt_end(self, messages, tools, text, i, previous_end):
        # Where the reply to messages[:i] starts in `text`: after the rendering of those messages
        # with add_generation_prompt. Some templates open the reply in the generation prompt
        # (DeepSeek-R1, QwQ, Gemma 4: "<think>\n"), close the last message otherwise than one
        # that has a reply after it (Hermes' tool results), or render earlier assistant turns
        # otherwise once more follow (Qwen3.5 drops their reasoning): there the reply starts
        # where the prompt stops matching, or after the generation prompt's header when it
        # follows nearby (or, for rewritten turns, after the previous reply).
        try:
            prompt = self.render(messages[:i], tools, True)
            history = self.render(messages[:i], tools, False)
        except Exception as error:
            if i == 0:
                return 0  # a conversation that opens with the assistant
            raise SpanError(f"assistant message {i + 1}: the template refuses the messages "
                            f"before it: {error}") from error
        if text.startswith(prompt):
            return len(prompt)
        generation = prompt[len(history):] if prompt.startswith(history) else ""
        openers = [o for o in dict.fromkeys([generation.strip(),
                                             generation.strip().split("\n")[0]]) if o]
        common = common_prefix(prompt, text)
        if common > previous_end:
            start = common
            lo, hi = max(previous_end, common - len(generation)), common + len(generation) + 2
        else:
            # Earlier turns rewritten: the first header after the previous reply (the first line
            # of the generation prompt; the rest of it may belong to the last turn only).
            start, lo, hi = None, previous_end, len(text)
            openers = openers[-1:]
        for opener in openers:
            found = text.find(opener, lo, hi + len(opener))
            if found >= 0:
                start = found + len(opener)
                trailing = generation[generation.index(opener) + len(opener):]
                trailing = trailing[:len(trailing) - len(trailing.lstrip())]
                if trailing and text.startswith(trailing, start):
                    start += len(trailing)
                break
        before = messages[i - 1].get("content") if i > 0 else None
        if start is None or (isinstance(before, str) and before.strip() and
                             before.strip() not in text[previous_end:start]):
            raise SpanError(
                f"assistant message {i + 1}: the rendering of the messages before it is not "
                "where the whole conversation's rendering starts; the template renders earlier "
                "turns differently as the conversation grows")
        return start

    def turn_span(self, messages, tools, text, i, previous_end):
        # None when the template writes nothing for this reply (an empty last reply that
        # Apertus and Seed-OSS leave out, or a tool-use template that renders no turns).
        start = self.prompt_end(messages, tools, text, i, previous_end)
        try:
            reply = self.render(messages[:i + 1], tools, False).rstrip()
            if reply in (self.render(messages[:i], tools, False).rstrip(),
                         self.render(messages[:i], tools, True).rstrip()):
                return None
        except Exception:
            pass
        # The conversation up to this reply matches the text up to `bound`: past this turn when
        # the template renders it alike whether it is the last or not, then a limit for it
        # (trusted when at least half the turn matches; Qwen3 writes a last tool call after an
        # empty reasoning block, an earlier one without).
        closed = self.render(messages[:i + 1], tools, False)
        bound = common_prefix(closed, text)
        trusted = bound > start and 2 * (bound - start) >= len(closed.rstrip()) - start
        closing = self.closing_token(last=i == len(messages) - 1)
        content = messages[i].get("content")
        after = start
        if isinstance(content, str) and content.strip():
            found = text.find(content.strip(), start)
            if found >= 0:
                after = found + len(content.strip())
        if closing:
            # The turn ends with the first closing token after its content (a template may
            # rewrite the reply, Qwen3 drops earlier turns' reasoning, so the content is searched
            # for, not assumed to sit at the start).
            end = text.find(closing, after)
            if end >= 0 and (not trusted or end <= bound):
                return start, end + len(closing)
        # No closing token there (GLM ends a tool call with the next role's tag): the turn is
        # what the rendering of the conversation up to it shares with the text, without the
        # whitespace after it.
        if trusted:
            return start, start + len(text[start:bound].rstrip())
        raise SpanError(f"cannot find where assistant message {i + 1} ends in the rendering")


def common_prefix(a, b):
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class SpanError(Exception):
    pass


def reply(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def error_reply(error):
    message = str(error) or type(error).__name__
    if isinstance(error, jinja2.exceptions.TemplateSyntaxError):
        message = f"template syntax error: {error.message}"
    out = {"error": message}
    line = template_line(error)
    if line is not None:
        out["template_line"] = line
    return out


def handle(renderer, request):
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return {"error": "the request has no \"messages\" list"}
    try:
        messages = normalize(request["messages"])
        tools = request.get("tools")
        add_generation_prompt = bool(request.get("add_generation_prompt", False))
        if renderer.generation:
            indices = []
            text = renderer.render(messages, tools, add_generation_prompt, indices)
            trained = [list(s) for s in indices]
        else:
            text = renderer.render(messages, tools, add_generation_prompt)
            try:
                trained = renderer.trained_spans(messages, tools, text)
            except SpanError as error:
                return {"error": f"cannot tell the trained tokens: {error}"}
        return {"text": text, "trained": trained}
    except Exception as error:  # the template's own raise_exception, or any error it runs into
        return error_reply(error)


def main():
    # JSON lines are UTF-8 whatever the locale says (-I ignores PYTHONIOENCODING).
    sys.stdin.reconfigure(encoding="utf-8", errors="surrogateescape")
    sys.stdout.reconfigure(encoding="utf-8")
    _lock_down()
    setup_line = sys.stdin.readline()
    try:
        setup = json.loads(setup_line)
        renderer = Renderer(setup["template"], setup.get("variables") or {})
    except Exception as error:
        reply(error_reply(error))
        return 0
    reply({"ok": True, "generation": renderer.generation})
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError as error:
            reply({"error": f"not JSON: {error}"})
            continue
        reply(handle(renderer, request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
