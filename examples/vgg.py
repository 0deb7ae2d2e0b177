"""Train VGG (11/13/16/19) on N OneFlow ranks with AutoDDL choosing the SBP plan.

    ci/launch.sh 4 examples/vgg.py --mesh 2x2 --width-mult 0.125 --image-size 32
    python -m oneflow.distributed.launch --nproc_per_node 8 examples/vgg.py --device cuda \\
        --mesh 8 --cluster dgx-a100 --batch-size 256
"""

import argparse

import numpy as np

# before OneFlow: each rank then waits for rank 0 to listen (launch.wait_for_rank0)
import oneflow_autoddl  # noqa: F401

# isort: split
import oneflow as flow
from common import TrainGraph, start, train
from vgg_model import VGG


def image_source(args):
    """(images, labels) from --data (.npz with `images` NCHW float and `labels` int), or synthetic
    images whose class is readable from their mean colour, so the loss can fall."""
    if args.data:
        with np.load(args.data) as d:
            images, labels = d["images"].astype(np.float32), d["labels"].astype(np.int64)
        expected = (3, args.image_size, args.image_size)
        if images.ndim != 4 or images.shape[1:] != expected:
            raise SystemExit(
                f"--data images must be N x {expected[0]} x {expected[1]} x {expected[2]}, "
                f"not {images.shape}"
            )
        return images, labels
    rng = np.random.RandomState(args.seed)
    n = args.batch_size * 4
    labels = rng.randint(0, args.num_classes, n)
    centres = rng.randn(args.num_classes, 3, 1, 1).astype(np.float32)
    images = centres[labels] + 0.5 * rng.randn(n, 3, args.image_size, args.image_size).astype(
        np.float32
    )
    return images, labels.astype(np.int64)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--depth", type=int, default=16, choices=[11, 13, 16, 19])
    parser.add_argument("--width-mult", type=float, default=0.125)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16, help="global batch")
    parser.add_argument(
        "--dropout", type=float, default=0.0, help="classifier dropout (0: losses comparable)"
    )
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--data", default=None, help="an .npz with images (N,3,H,W) and labels (N)")
    args, place, broadcast, batch_split = start(parser, argv)
    model = VGG(args.depth, args.width_mult, args.image_size, args.num_classes, args.dropout)
    model = model.to_global(place, broadcast)
    optimizer = flow.optim.SGD(model.parameters(), lr=args.lr or 0.02, momentum=args.momentum)
    graph = TrainGraph(model, flow.nn.CrossEntropyLoss(), optimizer, args)
    images, labels = image_source(args)

    def batch(step):
        idx = (np.arange(args.batch_size) + step * args.batch_size) % len(images)
        x = flow.tensor(images[idx]).to_global(place, broadcast).to_global(sbp=batch_split)
        y = flow.tensor(labels[idx]).to_global(place, broadcast).to_global(sbp=batch_split)
        return x, y

    return train(graph, batch, args, args.device)


if __name__ == "__main__":
    main()
