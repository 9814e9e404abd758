"""Benchmark: one layer's attention at long N — the fused flash kernel (what a plain forward runs), the single
pass in torch operations, and the fused tile kernel (probe.engine.tiles), each of the last two with every α
read by a trivial reducer (Σα per head); then the tile kernel with Σα summed inside it as a row reduction
(key weights of ones: no α block at all), alone and with the row entropy's K columns beside V. All
alternate in one process, 1 thread.

    python benchmarks/tiles.py --lengths 8192,16384 --repeats 3

GPT-2-small's layer shape (12 heads, head size 64, causal, random q/k/v), blocks of 128 query rows (the
engine's default α budget at 16K). Prints each variant's seconds per round and the ratios to the flash kernel;
the difference to the whole model's forward is what benchmarks/capture.py measures.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from probe.engine import tiles

HEADS, DIM, BLOCK_ROWS = 12, 64, 128


def variants(n: int) -> dict:
    """The variants over one set of random q, k, v of n tokens."""
    torch.manual_seed(0)
    query, key, value = (torch.randn(1, HEADS, n, DIM) for _ in range(3))  # [batch head seq dim]
    scale = DIM ** -0.5

    def flash() -> torch.Tensor:  # [head seq dim]
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, True,
                                                                          scale=scale)[0][0]

    def torch_path() -> torch.Tensor:  # what _stream_single_pass does below MIN_KEYS; [head seq dim]
        keys_t = key[0].transpose(1, 2)  # [head dim key]
        buffer = torch.empty(HEADS * BLOCK_ROWS * n)
        total = torch.zeros(HEADS)
        output = torch.empty(HEADS, n, DIM)
        causal = torch.zeros(BLOCK_ROWS, BLOCK_ROWS).masked_fill_(
            torch.ones(BLOCK_ROWS, BLOCK_ROWS, dtype=torch.bool).triu(1), -math.inf)
        for start in range(0, n, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, n)
            rows = stop - start
            block = buffer[: HEADS * rows * stop].view(HEADS, rows, stop)  # [head block key]
            torch.baddbmm(block, query[0, :, start:stop], keys_t[..., :stop], beta=0.0, alpha=scale,
                          out=block)
            block[..., start:stop] += causal[:rows, :rows]
            torch.ops.aten._softmax.out(block, -1, False, out=block)
            output[:, start:stop] = torch.bmm(block, value[0, :, :stop])  # [head block dim]
            total += block.sum((1, 2))
        return output

    def tile_kernel() -> torch.Tensor:  # [head seq dim]
        queries = query.view(HEADS, 1, n, DIM)  # [kv group query dim]
        keys_t = key.view(HEADS, n, DIM).transpose(1, 2).contiguous()  # [kv dim key]
        values = value.view(HEADS, n, DIM)
        buffer = torch.empty(HEADS * BLOCK_ROWS * n)
        block_output, lse = torch.empty(HEADS, 1, BLOCK_ROWS, DIM), torch.empty(HEADS, 1, BLOCK_ROWS)
        output = torch.empty(HEADS, n, DIM)
        total = torch.zeros(HEADS)
        for start in range(0, n, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, n)
            rows = stop - start
            block = buffer[: HEADS * rows * stop].view(HEADS, 1, rows, stop)  # [kv group block key]
            tiles.tile_block(queries, keys_t, values, None, block, block_output[:, :, :rows],
                             lse[:, :, :rows], scale, start, stop, stop, True)
            output[:, start:stop] = block_output[:, 0, :rows]
            total += block.sum((1, 2, 3))
        return output

    def reduced(entropy: bool):
        def run() -> torch.Tensor:  # [head seq dim]: Σα summed in the kernel (weights of ones), no α block
            queries = query.view(HEADS, 1, n, DIM)  # [kv group query dim]
            keys_t = key.view(HEADS, n, DIM).transpose(1, 2).contiguous()  # [kv dim key]
            # [kv key dim (+dim)]: the row entropy's α·K rides on α·V
            values = torch.cat([value.view(HEADS, n, DIM), *([key.view(HEADS, n, DIM)] if entropy else [])],
                               dim=-1)
            weights_t = torch.ones(1, 1, n)  # [batch feature key]
            width = values.shape[-1]
            block_output, lse = torch.empty(HEADS, 1, BLOCK_ROWS, width), torch.empty(HEADS, 1, BLOCK_ROWS)
            sums = torch.empty(HEADS, 1, BLOCK_ROWS, 1)  # [kv group block feature]
            output = torch.empty(HEADS, n, DIM)
            total = torch.zeros(HEADS)
            for start in range(0, n, BLOCK_ROWS):
                stop = min(start + BLOCK_ROWS, n)
                rows = stop - start
                tiles.tile_block(queries, keys_t, values, None, None, block_output[:, :, :rows],
                                 lse[:, :, :rows], scale, start, stop, stop, True, weights_t=weights_t,
                                 reduced=sums[:, :, :rows])
                output[:, start:stop] = block_output[:, 0, :rows, :DIM]
                total += sums[:, 0, :rows, 0].sum(-1)
            assert torch.allclose(total, torch.full_like(total, n), rtol=1e-4)  # every row's α sums to 1
            return output
        return run

    return {"flash": flash, "torch path + Σα": torch_path, "tile kernel + Σα": tile_kernel,
            "reduced Σα in kernel": reduced(False), "reduced Σα + entropy": reduced(True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="16384", help="comma-separated N (default 16384)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not tiles.available():
        raise SystemExit("the tile kernel is not available here (see the line above)")
    for n in (int(length) for length in args.lengths.split(",")):
        runs = variants(n)
        for run in runs.values():  # warm-up
            run()
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - start)
        flash = seconds["flash"]
        print(f"N = {n}:")
        for name, values in seconds.items():
            ratios = ", ".join(f"{value / base:.2f}" for value, base in zip(values, flash, strict=True))
            print(f"  {name:26s} s: {', '.join(f'{v:.2f}' for v in values)}   / flash: {ratios}")


if __name__ == "__main__":
    main()
