"""CPU peer for bench-train: PyTorch fp32 training steps (forward, backward, AdamW) of the same
Llama shapes on the CPU, for a side-by-side tokens/s ratio in the same device call.

usage: python3 torch_cpu_peer.py [threads] [micro_batch] [seq_len]
"""
import json, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
mb = int(sys.argv[2]) if len(sys.argv) > 2 else 4
seq = int(sys.argv[3]) if len(sys.argv) > 3 else 256
torch.set_num_threads(threads)
shapes = {
    "stories260K": dict(vocab_size=512, hidden_size=64, intermediate_size=172, num_hidden_layers=5,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=8, tie_word_embeddings=True),
    "llama-50m": dict(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=8, tie_word_embeddings=False),
}
for name, kw in shapes.items():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=2048, **kw)).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, kw["vocab_size"], (mb, seq))
    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(2):
        step()
    t0 = time.perf_counter()
    n = 5
    for _ in range(n):
        step()
    dt = (time.perf_counter() - t0) / n
    print(json.dumps({"peer": "torch_cpu", "model": name, "threads": threads, "tokens": mb * seq,
                      "step_s": dt, "tokens_per_s": mb * seq / dt}), flush=True)
