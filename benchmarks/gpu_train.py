"""Train a GPT under torch.compile(fullgraph=True) with the course's attention and with SDPA flash.

The capstone of notebook 13 at nanoGPT's small size: 12 layers, 12 heads of d = 64
(C = 768), T = 1024, on the characters of the shipped text (`flashcourse.model.text`),
parameters in fp32 with bf16 autocast, AdamW. Two runs from one seed on the same batches:

    course  attention = `flashcourse.torch_ops.attention` (the forward of `flashcourse.cuda`,
            "hopper" on an H100/H200 and "tensor_core" elsewhere, and the "tensor_core"
            backward, registered as torch.library custom operators)
    sdpa    attention = torch.nn.functional.scaled_dot_product_attention with only the
            FLASH_ATTENTION backend allowed (torch.nn.attention.sdpa_kernel)

Before training, `torch.library.opcheck` tests both operators (schema, fake tensor,
autograd registration, AOT dispatch) on small CUDA tensors, and `check_fast_path` compares
the operators' replayed plans (`torch_ops._planned`) with their checked path bit for bit.
Logged per step: the loss; per run: the median whole-step time, tokens/s, and the
attention forward + backward time of one step (one layer's attention on (B, H, T, d)
tensors timed with CUDA events, median of repeats, times n_layer; measured outside the
model, the same way for both).

    python benchmarks/gpu_train.py --out DIR                # >= 300 steps, ~5 min on an H100
    python benchmarks/gpu_train.py --steps 500 --out DIR
    python benchmarks/gpu_train.py --quick --out DIR        # tiny model, ~30 s
    python benchmarks/gpu_train.py --simulator-smoke        # no GPU: the CPU path (numpy
                                                            # tiled op), tiny, no compile
    python benchmarks/gpu_train.py --record                 # on a GPU: benchmarks/results/

Needs PyTorch (`pip install -r requirements-train.txt`) and, on a GPU, requirements-gpu.txt.
Writes gpu_train.json (schema flashcourse/schemas/gpu_train.json) and gpu_train_log.txt.
"""

from __future__ import annotations

import math
import time

import numpy as np

import flashcourse  # noqa: F401  (selects the GPU or the simulator before numba loads)
from flashcourse import env, results
from flashcourse.model import text

RESULT_FILE = "gpu_train.json"
LOG_FILE = "gpu_train_log.txt"
#: nanoGPT's GPT-2 small at its context length; B = 8 sequences a step
FULL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, batch=8, steps=300)
QUICK = dict(n_layer=2, n_head=4, n_embd=256, block_size=256, batch=8, steps=40)
SMOKE = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch=2, steps=3)
#: the done-when of the capstone: the course's loss within this of SDPA's at every step
LOSS_RTOL = 0.01


def build_model(torch, cfg, vocab: int, attention: str):
    """A nanoGPT-shaped GPT (pre-norm blocks, GELU MLP, tied head as in GPT-2) whose
    attention is the course's custom operator ("course") or SDPA flash ("sdpa")."""
    nn, F = torch.nn, torch.nn.functional
    from flashcourse import torch_ops

    def attend(q, k, v):                                  # (B, H, T, d) each
        if attention == "course":
            return torch_ops.attention(q, k, v, causal=True)
        if q.is_cuda:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    c, h = cfg["n_embd"], cfg["n_head"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.fc, self.fc_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
            q, k, v = (a.view(b, t, h, c // h).transpose(1, 2).contiguous() for a in (q, k, v))
            y = attend(q, k, v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, c)
            self.wpe = nn.Embedding(cfg["block_size"], c)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(c)
            self.apply(self._init)
            for name, p in self.named_parameters():       # GPT-2: residual projections
                if name.endswith(("proj.weight", "fc_proj.weight")):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg["n_layer"]))

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.T         # (B, T, V), head tied to wte
            return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    return GPT()


def run_opcheck(torch, device, dtype) -> dict:
    """torch.library.opcheck on both operators; {operator: "ok" or the first failure}."""
    from flashcourse import torch_ops
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(2, 3, 80, 64, generator=g).to(device=device, dtype=dtype)
               .requires_grad_() for _ in range(3))
    scale = 1 / 8.0
    out = {}
    o, lse = torch_ops.attention_forward(q, k, v, True, scale)
    do = torch.randn_like(o)
    cases = {"attention_forward": (torch_ops.attention_forward, (q, k, v, True, scale)),
             "attention_backward": (torch_ops.attention_backward,
                                    (q.detach(), k.detach(), v.detach(), o.detach(),
                                     lse.detach(), do, True, scale))}
    for name, (op, args) in cases.items():
        try:
            torch.library.opcheck(op, args)
            out[name] = "ok"
        except Exception as exc:                          # recorded, and the run fails
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return out


def check_fast_path(torch, device, dtype) -> str:
    """The operators' replayed plans (`torch_ops._planned`) against their checked path
    (FLASHCOURSE_PACKED_LAUNCH=0), bit for bit: o, lse and the three gradients, at the
    opcheck's ragged shape and the capstone's, each called twice (the first call of a key
    records its plan, the second replays it on other tensors of the same shapes). "ok" or
    what differed."""
    import os

    from flashcourse import torch_ops
    g = torch.Generator(device="cpu").manual_seed(1)
    for shape in ((2, 3, 80, 64), (8, 12, 1024, 64)):
        def run(seed_tensors):
            q, k, v, do = (t.to(device=device, dtype=dtype) for t in seed_tensors)
            o, lse = torch_ops.attention_forward(q, k, v, True, 0.125)
            return (o, lse, *torch_ops.attention_backward(q, k, v, o, lse, do, True, 0.125))
        for trial in range(2):
            cpu = [torch.randn(*shape, generator=g) for _ in range(4)]
            os.environ["FLASHCOURSE_PACKED_LAUNCH"] = "0"
            try:
                want = run(cpu)
            finally:
                del os.environ["FLASHCOURSE_PACKED_LAUNCH"]
            got = run(cpu)
            for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), got, want):
                if not torch.equal(a, b):
                    return (f"{name} of the fast path differs from the checked path at "
                            f"{shape}, call {trial + 1}")
    torch.cuda.synchronize()
    return "ok"


def time_attention(torch, cfg, device, dtype, attention: str, repeats: int = 20) -> dict:
    """Median seconds of one layer's attention on (B, H, T, d) tensors, forward alone
    ("forward") and forward + backward ("forward_backward"); CUDA events (host clock on
    the CPU), 3 untimed calls first."""
    from flashcourse import torch_ops
    F = torch.nn.functional
    b, h, t, d = cfg["batch"], cfg["n_head"], cfg["block_size"], cfg["n_embd"] // cfg["n_head"]
    q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    do = torch.randn(b, h, t, d, device=device, dtype=dtype)

    def step(backward: bool):
        if attention == "course":
            o = torch_ops.attention(q, k, v, causal=True)
        else:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            backends = [SDPBackend.FLASH_ATTENTION] if q.is_cuda else [SDPBackend.MATH]
            with sdpa_kernel(backends):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if backward:
            o.backward(do)

    out = {}
    for name, backward in (("forward", False), ("forward_backward", True)):
        for _ in range(3):
            step(backward)
        times = []
        for _ in range(repeats):
            if q.is_cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                step(backward)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                step(backward)
                times.append(time.perf_counter() - t0)
        out[name] = float(np.median(times))
    return out


def train(torch, cfg, ids, device, amp_dtype, attention: str, seed: int, compile_: bool,
          log) -> dict:
    """One training run; per-step losses and seconds, whole-step tokens/s."""
    torch.manual_seed(seed)
    model = build_model(torch, cfg, int(ids.max()) + 1, attention).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, cfg["steps"] // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    fwd = torch.compile(model, fullgraph=True) if compile_ else model
    rng = np.random.default_rng(seed)
    losses, step_s = [], []
    t_compile = time.perf_counter()
    for step in range(cfg["steps"]):
        x, y = text.get_batch(ids, cfg["batch"], cfg["block_size"], rng)   # (B, T) each
        x, y = (torch.from_numpy(a).to(device) for a in (x, y))
        t0 = time.perf_counter()
        with torch.autocast(device_type=device, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))                # .item() waits for the GPU
        step_s.append(time.perf_counter() - t0)
        if step == 0:
            log(f"  {attention}: first step (compiles) {time.perf_counter() - t_compile:.1f} s")
        if step % 25 == 0 or step == cfg["steps"] - 1:
            log(f"  {attention} step {step:4d} loss {losses[-1]:.4f} {step_s[-1] * 1e3:8.1f} ms")
    steady = step_s[min(5, len(step_s) - 1):]             # after compiling and warm-up
    tokens = cfg["batch"] * cfg["block_size"]
    return {"loss": losses, "step_ms": [s * 1e3 for s in step_s],
            "median_step_ms": float(np.median(steady)) * 1e3,
            "tokens_per_s": tokens / float(np.median(steady))}


def main(argv=None):
    ap = results.benchmark_parser(__doc__, "quick")
    results.add_output_arguments(ap)
    ap.add_argument("--steps", type=int, default=None, help="training steps per run "
                    "(default 300; --quick 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backward-pipeline", choices=("async", "wgmma"), default=None,
                    help="the course's backward: the tensor-core default (async, mma.sync) "
                         "or Hopper's wgmma (compute capability 9.0)")
    args = ap.parse_args(argv)
    conflicts = {k: v for k, v in (("--quick", "a tiny model"), ("--steps", "another length"))
                 if getattr(args, k[2:]) not in (None, False)}
    results.check_outputs(args, __file__, conflicts=conflicts or None)
    results.require_gpu("benchmarks/gpu_train.py", args.simulator_smoke)
    if args.steps is not None and args.steps < 1:
        raise SystemExit(f"--steps must be a positive number of steps, got {args.steps}")
    try:
        import torch
    except ImportError:
        raise SystemExit("benchmarks/gpu_train.py needs PyTorch: pip install -r "
                         "requirements-train.txt") from None
    cfg = dict(SMOKE if args.simulator_smoke else QUICK if args.quick else FULL)
    if args.steps is not None:
        cfg["steps"] = args.steps
    on_gpu = not args.simulator_smoke
    device = "cuda" if on_gpu else "cpu"
    amp = torch.bfloat16 if on_gpu else None
    op_dtype = torch.bfloat16 if on_gpu else torch.float32
    out = results.output_dir(args)
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    ids = text.CharTokenizer(text.load_text()).encode(text.load_text())
    log(f"config {cfg}, device {device}, autocast {amp}")
    if on_gpu:
        from flashcourse import torch_ops
        probe = torch.empty(1, 1, 1, cfg["n_embd"] // cfg["n_head"], device=device)
        if args.backward_pipeline:
            torch_ops.BACKWARD_OPTIONS["pipeline"] = args.backward_pipeline
        kernels = {"forward": torch_ops.forward_kernel(probe),
                   "backward": torch_ops.CUDA_KERNEL + "".join(
                       f" {k}={v}" for k, v in sorted(torch_ops.BACKWARD_OPTIONS.items()))}
    else:
        kernels = {"forward": "numpy tiled", "backward": "numpy tiled"}
    log(f"course kernels: {kernels}")
    checks = run_opcheck(torch, device, op_dtype)
    if on_gpu:                  # the replayed plans against the checked path, bit for bit
        checks["fast_path"] = check_fast_path(torch, device, op_dtype)
    log(f"opcheck: {checks}")
    runs = {}
    for attention in ("course", "sdpa"):
        runs[attention] = train(torch, cfg, ids, device, amp, attention, args.seed,
                                compile_=on_gpu, log=log)
        timed = time_attention(torch, cfg, device, op_dtype, attention)
        runs[attention]["attention_ms_per_step"] = cfg["n_layer"] * 1e3 * timed["forward_backward"]
        runs[attention]["attention_forward_ms_per_step"] = cfg["n_layer"] * 1e3 * timed["forward"]
        log(f"{attention}: median step {runs[attention]['median_step_ms']:.1f} ms, "
            f"{runs[attention]['tokens_per_s']:,.0f} tokens/s, attention fwd+bwd "
            f"{runs[attention]['attention_ms_per_step']:.2f} ms per step (forward alone "
            f"{runs[attention]['attention_forward_ms_per_step']:.2f} ms)")
    c, s = np.array(runs["course"]["loss"]), np.array(runs["sdpa"]["loss"])
    worst = float(np.max(np.abs(c - s) / np.abs(s)))
    doc = {"environment": env.record(), "config": cfg, "device": device,
           "dtype": "bf16" if on_gpu else "fp32", "compiled_fullgraph": on_gpu,
           "opcheck": checks, "course_kernels": kernels, "runs": runs,
           "loss_max_rel_diff": worst, "loss_within": worst <= LOSS_RTOL,
           "attention_not_slower": runs["course"]["attention_ms_per_step"]
           <= runs["sdpa"]["attention_ms_per_step"]}
    log(f"largest |course - sdpa| / sdpa loss over {cfg['steps']} steps: {worst:.2e} "
        f"(target <= {LOSS_RTOL}); attention course / sdpa: "
        f"{runs['course']['attention_ms_per_step'] / runs['sdpa']['attention_ms_per_step']:.2f}")
    path = results.write_json(out, RESULT_FILE, doc, "gpu_train")
    log_path = results.write_output(out, LOG_FILE, "\n".join(lines) + "\n")
    print("wrote", path, "and", log_path)
    ok = all(v == "ok" for v in checks.values()) and doc["loss_within"]
    results.finish(args, out, ok=ok)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
