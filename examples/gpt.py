"""Train a GPT-2 style decoder on N OneFlow ranks with AutoDDL choosing the SBP plan.

    ci/launch.sh 4 examples/gpt.py --mesh 2x2                 # 4 CPU ranks, 2 x 2 mesh
    python -m oneflow.distributed.launch --nproc_per_node 8 examples/gpt.py --device cuda \\
        --mesh 8 --cluster dgx-a100 --layers 12 --hidden 768 --heads 12 --seq-len 1024
"""

import argparse

import numpy as np

# before OneFlow: each rank then waits for rank 0 to listen (launch.wait_for_rank0)
import oneflow_autoddl  # noqa: F401

# isort: split
import oneflow as flow
from common import TrainGraph, start, train
from gpt_model import GPT, GPTLoss


def token_stream(args):
    """Byte tokens of --data, or a deterministic synthetic stream a model can learn (a noisy
    cycle)."""
    if args.data:
        with open(args.data, "rb") as f:
            data = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
        if args.vocab < 256:
            raise SystemExit("--data gives byte tokens: --vocab must be at least 256")
        return data
    rng = np.random.RandomState(args.seed)
    cycle = rng.permutation(args.vocab)
    n = (args.steps + 1) * args.batch_size * (args.seq_len + 1) + 1
    noise = rng.rand(n) < 0.1
    return np.where(noise, rng.randint(0, args.vocab, n), cycle[np.arange(n) % args.vocab])


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8, help="global batch")
    parser.add_argument("--data", default=None, help="a text file; trains on its bytes")
    args, place, broadcast, batch_split = start(parser, argv)
    model = GPT(args.layers, args.hidden, args.heads, args.seq_len, args.vocab).to_global(
        place, broadcast
    )
    optimizer = flow.optim.AdamW(model.parameters(), lr=args.lr or 3e-3)
    graph = TrainGraph(model, GPTLoss(), optimizer, args)
    tokens = token_stream(args)
    span = args.batch_size * (args.seq_len + 1)

    def batch(step):
        start = (step * span) % max(1, len(tokens) - span)
        chunk = tokens[start : start + span].reshape(args.batch_size, args.seq_len + 1)
        x = flow.tensor(chunk[:, :-1].copy()).to_global(place, broadcast).to_global(sbp=batch_split)
        y = flow.tensor(chunk[:, 1:].copy()).to_global(place, broadcast).to_global(sbp=batch_split)
        return x, y

    return train(graph, batch, args, args.device)


if __name__ == "__main__":
    main()
