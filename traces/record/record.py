"""Train a small model on the CPU for a few steps, under traces/record's
LD_PRELOAD library, marking phases in the trace it writes.

    GPUALLOC_TRACE=out.csv GPUALLOC_TRACE_START=mark \
    LD_PRELOAD=./libgpualloc_record.so python3 record.py resnet18

record.sh runs it for every model and compresses the traces. Without the
library (no LD_PRELOAD) it just trains, which is useful for timing.

Models:
    resnet18     torchvision's resnet18, 1000 classes, random images of
                 3x224x224, batch 8, SGD with momentum, 3 steps
    transformer  nn.TransformerEncoder, 2 layers, d_model 256, 4 heads,
                 feed-forward 1024, token embedding and a classifier over a
                 1000-token vocabulary, batch 8, sequence length drawn from
                 16..256 at each of 16 steps, Adam
"""

import ctypes
import gc
import random
import sys

import torch
import torch.nn as nn


def library():
    """Returns the recording library's mark, start and stop, or no-ops."""
    try:
        lib = ctypes.CDLL(None)
        mark, start, stop = lib.gpualloc_mark, lib.gpualloc_start, lib.gpualloc_stop
    except AttributeError:  # not preloaded
        return (lambda phase: None), (lambda: None), (lambda: None)
    mark.argtypes = [ctypes.c_char_p]
    mark.restype = None
    return (lambda phase: mark(phase.encode())), start, stop


def resnet18(mark, steps=3, batch=8):
    import torchvision

    mark("build resnet18")
    model = torchvision.models.resnet18(weights=None)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(steps):
        mark(f"step {step} data")
        x = torch.randn(batch, 3, 224, 224)
        y = torch.randint(0, 1000, (batch,))
        mark(f"step {step} forward")
        loss = loss_fn(model(x), y)
        mark(f"step {step} backward")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        mark(f"step {step} optimizer")
        opt.step()
        del x, y, loss
    mark("teardown")
    del model, opt
    gc.collect()


class Encoder(nn.Module):
    def __init__(self, vocab=1000, d_model=256, heads=4, ff=1024, layers=2, max_len=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1]).unsqueeze(0)
        return self.head(self.encoder(self.embed(tokens) + self.pos(pos)))


def transformer(mark, steps=16, batch=8, lengths=(16, 256)):
    mark("build transformer")
    model = Encoder()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    rng = random.Random(1)
    for step in range(steps):
        seq = rng.randint(*lengths)
        mark(f"step {step} data seq {seq}")
        tokens = torch.randint(0, 1000, (batch, seq))
        target = torch.randint(0, 1000, (batch, seq))
        mark(f"step {step} forward")
        out = model(tokens)
        loss = loss_fn(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        mark(f"step {step} backward")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        mark(f"step {step} optimizer")
        opt.step()
        del tokens, target, out, loss
    mark("teardown")
    del model, opt
    gc.collect()


MODELS = {"resnet18": resnet18, "transformer": transformer}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in MODELS:
        sys.exit(f"usage: record.py {'|'.join(MODELS)}")
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    mark, start, stop = library()
    start()
    mark(f"torch {torch.__version__}, {sys.argv[1]}")
    MODELS[sys.argv[1]](mark)
    stop()


if __name__ == "__main__":
    main()
