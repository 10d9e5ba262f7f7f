#!/usr/bin/env python3
"""op_table.py: the peers' ceilings it picks for a 7B step's op families, and one call of the
script on the CPU backend with a stand-in for op_ceilings.py (no GPU, no PyTorch needed).

usage: python3 tests/bench/op_table_test.py WORKER
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_table  # noqa: E402

WORKER = None

# op_ceilings.py's lines, each GEMM at its own rate so that the weighting shows.
GEMM_RATES = {'qkv': (600.0, 500.0, 450.0), 'o': (700.0, 650.0, 600.0),
              'gate_up': (800.0, 760.0, 700.0), 'down': (500.0, 480.0, 400.0),
              'lm_head': (640.0, 620.0, 580.0)}  # fwd, dgrad, wgrad


def peer_lines():
    lines = []
    for tokens, scale in ((8192, 1.0), (16384, 0.5)):  # the 16K rows must not be picked for 8K
        for name, (fwd, dgrad, wgrad) in GEMM_RATES.items():
            lines.append({'op': f'gemm_{name}', 'tokens': tokens, 'fwd_tflops': fwd * scale,
                          'dgrad_tflops': dgrad * scale, 'wgrad_tflops': wgrad * scale,
                          'wgrad_bf16_then_f32_add_tflops': 1.0})
    for b, s, fwd, fwd_bwd in ((4, 2048, 540.0, 360.0), (8, 2048, 550.0, 365.0),
                               (2, 4096, 600.0, 446.0)):
        lines.append({'op': 'attention', 'backend': 'FLASH_ATTENTION', 'B': b, 'S': s, 'H': 32,
                      'D': 128, 'fwd_tflops': 1.0, 'fwd_bwd_tflops': 1.0})
        lines.append({'op': 'attention', 'backend': 'CUDNN_ATTENTION', 'B': b, 'S': s, 'H': 32,
                      'D': 128, 'fwd_tflops': fwd, 'fwd_bwd_tflops': fwd_bwd})
    lines.append({'op': 'attention', 'backend': 'SDPBackend.CUDNN_ATTENTION', 'error': 'no cuDNN'})
    lines.append({'op': 'cpu_adamw_fp32_fused_torch', 'params_per_s_M': 4500})
    return lines


LAYER_SHAPES = ['[8192, 4096, 4096]', '[8192, 4096, 11008]', '[8192, 11008, 4096]']


class PeerRate(unittest.TestCase):
    def rate(self, op, shapes):
        return op_table.peer_rate({'op': op, 'shapes': shapes}, peer_lines())

    def test_gemms_weigh_each_layer_gemm_by_its_flops(self):
        # y[8192, n] = x[8192, k] . W^T: seconds per 2·8192 FLOPs of each, summed.
        kn = {'qkv': 4096 * 12288, 'o': 4096 * 4096, 'gate_up': 4096 * 22016, 'down': 11008 * 4096}
        fwd = sum(kn.values()) / sum(kn[g] / GEMM_RATES[g][0] for g in kn)
        self.assertAlmostEqual(self.rate('gemm_forward', LAYER_SHAPES), fwd)
        bwd = 2 * sum(kn.values()) / sum(kn[g] / GEMM_RATES[g][1] + kn[g] / GEMM_RATES[g][2]
                                         for g in kn)
        self.assertAlmostEqual(self.rate('gemm_backward', LAYER_SHAPES), bwd)
        head = 3 / (1 / 640 + 1 / 620 + 1 / 580)
        self.assertAlmostEqual(self.rate('lm_head_loss', ['[8192, 4096, 32000]']), head)

    def test_attention_is_cudnns_at_the_same_sequence_and_head_size(self):
        self.assertEqual(self.rate('attention_forward', ['[4, 2048, 32, 128]']), 540.0)
        # backward = 3.5 forwards less one, over 2 forwards' FLOPs
        self.assertAlmostEqual(self.rate('attention_backward', ['[4, 2048, 32, 128]']),
                               2 / (3.5 / 360 - 1 / 540))
        self.assertEqual(self.rate('attention_forward', ['[2, 4096, 32, 128]']), 600.0)

    def test_other_shapes_have_no_peer(self):
        self.assertIsNone(self.rate('gemm_forward', ['[8192, 2048, 2048]']))
        self.assertIsNone(self.rate('gemm_forward', ['[4096, 4096, 4096]']))  # no 4K-token rows
        self.assertIsNone(self.rate('lm_head_loss', ['[8192, 2048, 32000]']))
        self.assertIsNone(self.rate('attention_forward', ['[4, 2048, 32, 64]']))
        self.assertIsNone(self.rate('rmsnorm', ['[8192, 4096]']))


class Script(unittest.TestCase):
    def test_one_call_prints_each_family_of_the_step(self):
        with tempfile.TemporaryDirectory() as tmp:
            ceilings = os.path.join(tmp, 'op_ceilings.py')
            with open(ceilings, 'w') as f:
                f.write('import json\n')
                for line in peer_lines():
                    f.write(f'print(json.dumps({line!r}))\n')
            raw = os.path.join(tmp, 'raw.jsonl')
            out = subprocess.run(
                [sys.executable, op_table.__file__, '--raw', raw, ceilings, WORKER, '--model',
                 'llama-tiny', '--backend', 'cpu', '--micro-batch', '2', '--seq-len', '32',
                 '--micro-batches', '2', '--steps', '1', '--warmup', '1'],
                capture_output=True, text=True, check=True).stdout
            with open(raw) as f:
                lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), len(peer_lines()) + 1)  # the peers', then the bench's
        bench = lines[-1]
        self.assertEqual(bench['model'], 'llama-tiny')
        for row in bench['ops']:
            self.assertIn(f"| {row['op']} |", out)
        self.assertIn('| sum (compute stream) |', out)
        self.assertIn('copy_d2d of 64 MiB', out)


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    WORKER = sys.argv.pop(1)
    unittest.main()
