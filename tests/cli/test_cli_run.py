"""``openreg-lab run``: a script runs as Python would run it, traced; its exit code is kept."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import openreg_lab as lab
from tests.support.cli_helpers import env, openreg_lab, table_rows, with_default_sigint

FALLS_BACK = """\
import sys
import torch
import openreg_lab

print("argv", sys.argv, "name", __name__, "path0", sys.path[0], "main", sys.modules["__main__"].__file__)
x = torch.arange(9.0).reshape(3, 3).to("openreg")
for _ in range(3):
    y = x.atan2(x)
z = torch.ones(4, device="openreg").logcumsumexp(0)
if sys.argv[1:2] == ["raise"]:
    raise RuntimeError("boom from the script")
if sys.argv[1:2] == ["exit"]:
    sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "scripts" / "falls_back.py"
    path.parent.mkdir()
    path.write_text(FALLS_BACK)
    return path


def test_run_prints_the_exact_fallback_table_and_writes_the_files(script, tmp_path):
    p = openreg_lab(
        "run", "--stack", "--shapes", "--trace", "run.trace", "--chrome", "run.json",
        script, "--epochs", "1", "--stack",  # the script's own options, even ones named like ours
        cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(
        f"argv ['{script}', '--epochs', '1', '--stack'] name __main__ path0 {script.parent} main {script}"
    )
    rows = table_rows(p.stderr, "top fallbacks")  # ranked by time, which varies: compare sorted
    assert sorted((r[0], r[1], r[-1]) for r in rows) == [
        ("aten::_logcumsumexp", "1", "falls_back.py:9"),
        ("aten::atan2.out", "3", "falls_back.py:8"),
    ]
    assert all(len(r) == 6 for r in rows)  # op, calls, time, to cpu, back, source
    assert "top fallbacks (2 of 2 ops, by time including copies)" in p.stderr
    assert "finished (exit code 0)" in p.stderr or "exited (exit code 0)" in p.stderr
    assert "none dropped" in p.stderr
    assert "op events:" not in p.stderr  # every op: the default needs no note
    t = lab.load_trace(tmp_path / "run.trace")
    fb = t.fallbacks()
    assert dict(zip(fb["name"], fb["calls"], strict=True)) == {"aten::atan2.out": 3, "aten::_logcumsumexp": 1}
    assert t.record_shapes and t.stack
    assert t.host_sampling  # the host's Python is sampled unless --no-host-samples
    assert sorted(fb.loc[fb["name"] == "aten::atan2.out", "sources"].iloc[0]) == [f"{script}:8"]
    chrome = json.loads((tmp_path / "run.json").read_text())
    assert any(e.get("name") == "aten::atan2.out" for e in chrome["traceEvents"])


def test_a_script_that_raises_keeps_its_exit_code_and_partial_trace(script, tmp_path):
    p = openreg_lab("run", "--trace", "partial.trace", script, "raise", cwd=tmp_path)
    assert p.returncode == 1
    # The traceback is the script's, as `python script.py` prints it: no runpy or openreg-lab frames.
    tb = p.stderr[p.stderr.index("Traceback") :]
    assert "runpy" not in tb and "openreg_lab" not in tb.split("RuntimeError")[0]
    assert f'File "{script}", line 11, in <module>' in tb
    assert "RuntimeError: boom from the script" in tb
    assert "falls_back.py raised RuntimeError (exit code 1)" in p.stderr
    fb = lab.load_trace(tmp_path / "partial.trace").fallbacks()
    assert dict(zip(fb["name"], fb["calls"], strict=True)) == {"aten::atan2.out": 3, "aten::_logcumsumexp": 1}


def test_ops_kernels_finds_the_same_fallbacks_without_composites_or_backward(script, tmp_path):
    p = openreg_lab("run", "--ops", "kernels", "--stack", "--trace", "k.trace", script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "op events: openreg's kernels only (--ops kernels)" in p.stderr
    rows = table_rows(p.stderr, "top fallbacks")
    assert sorted((r[0], r[1], r[-1]) for r in rows) == [
        ("aten::_logcumsumexp", "1", "falls_back.py:9"),
        ("aten::atan2.out", "3", "falls_back.py:8"),
    ]
    t = lab.load_trace(tmp_path / "k.trace")
    assert t.ops == "kernels"
    ops = t.events[t.events["kind"] == "op"]
    assert "composite" not in set(ops["kernel"])  # aten::atan2 and aten::logcumsumexp are composites
    assert ops["name"].tolist().count("aten::atan2.out") == 3
    bad = openreg_lab("run", "--ops", "some", script, cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'some'" in bad.stderr


def test_no_host_samples_traces_the_same_ops_and_samples_no_python(script, tmp_path):
    p = openreg_lab("run", "--no-host-samples", "--trace", "quiet.trace", script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    t = lab.load_trace(tmp_path / "quiet.trace")
    assert not t.host_sampling and len(t.host_events) == 0
    fb = t.fallbacks()
    assert dict(zip(fb["name"], fb["calls"], strict=True)) == {"aten::atan2.out": 3, "aten::_logcumsumexp": 1}


def test_a_module_runs_like_python_dash_m_and_its_sys_exit_code_is_kept(script, tmp_path):
    p = openreg_lab("run", "--trace", "m.trace", "-m", "falls_back", "exit", "3", cwd=script.parent)
    assert p.returncode == 3, p.stderr
    assert p.stdout.startswith(f"argv ['{script}', 'exit', '3'] name __main__ path0 {script.parent}")
    assert "falls_back exited (exit code 3)" in p.stderr
    assert (script.parent / "m.trace").exists()


# In 2 of about 4 full runs (CI's clone, a helper's run) this child ignored the Ctrl-C and never
# exited: those runs started pytest in the background of a shell without job control, which ignores
# SIGINT, and the child inherited that. It now starts with SIGINT at its default
# (``with_default_sigint``); a timeout still fails with every thread's stack (faulthandler on SIGABRT).
def test_ctrl_c_gives_130_with_the_traceback_and_the_partial_trace(tmp_path):
    (tmp_path / "slow.py").write_text(
        textwrap.dedent(
            """\
            import time, torch, openreg_lab
            torch.ones(3, device="openreg").logcumsumexp(0)
            print("ready", flush=True)
            while True:
                time.sleep(0.05)
            """
        )
    )
    proc = subprocess.Popen(
        with_default_sigint([sys.executable, "-m", "openreg_lab", "run", "--trace", "int.trace", "slow.py"]),
        cwd=tmp_path, env={**env(), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=180)  # a loaded machine writes the partial trace slowly
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, err = proc.communicate(timeout=60)
            pytest.fail(f"run did not exit 180 s after Ctrl-C; its threads:\n{err[-8000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)  # reaped and its pipes closed: no process left behind
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err and 'File "slow.py", line 5, in <module>' in err
    assert "slow.py was interrupted (exit code 130)" in err
    fb = lab.load_trace(tmp_path / "int.trace").fallbacks()
    assert fb["name"].tolist() == ["aten::_logcumsumexp"]


CUDA_SCRIPT = """\
\"\"\"A training step written for CUDA, as found in the wild.\"\"\"
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()

assert torch.cuda.is_available(), "this script needs a GPU"
device = torch.device("cuda")
torch.cuda.manual_seed_all(0)
torch.cuda.set_device(0)
print("devices", torch.cuda.device_count(), "current", torch.cuda.current_device())
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(16, 32).to(device, non_blocking=True)
y = torch.randint(0, 10, (16,), device="cuda")
stream = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.reset_peak_memory_stats()
for epoch in range(args.epochs):
    torch.cuda.nvtx.range_push(f"epoch {epoch}")
    start.record()
    with torch.cuda.stream(stream):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = nn.functional.cross_entropy(out.float(), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    end.record()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    print(f"epoch {epoch} loss {loss.item():.3f} on {x.device} {out.dtype} is_cuda={x.is_cuda}")
print("peak bytes", torch.cuda.max_memory_allocated() > 0, next(model.parameters()).device)
"""


def test_from_cuda_runs_an_unmodified_cuda_script(tmp_path):
    (tmp_path / "train.py").write_text(CUDA_SCRIPT)
    p = openreg_lab("run", "--from-cuda", "--trace", "cuda.trace", "train.py", "--epochs", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "devices 2 current 0",
        *(f"epoch {i} loss {loss} on openreg:0 torch.bfloat16 is_cuda=True" for i, loss in _losses(p.stdout)),
        "peak bytes True openreg:0",
    ]
    fb = lab.load_trace(tmp_path / "cuda.trace").fallbacks()
    # GradScaler's two ops have no openreg kernel: this is what the port would cost.
    assert dict(zip(fb["name"], fb["calls"], strict=True)) == {
        "aten::_amp_foreach_non_finite_check_and_unscale_": 2,
        "aten::_amp_update_scale_": 2,
    }
    casts = lab.load_trace(tmp_path / "cuda.trace").casts()
    assert set(casts["to_dtype"]) == {"bfloat16"}
    events = lab.load_trace(tmp_path / "cuda.trace").events
    assert events.loc[events["kind"] == "mark", "name"].tolist() == [  # the script's NVTX ranges
        "epoch 0", "epoch 0 (end)", "epoch 1", "epoch 1 (end)"
    ]  # fmt: skip


COMPILED_CUDA_SCRIPT = """
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
torch.manual_seed(1337)
model = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
if "--no-compile" not in sys.argv:
    model = torch.compile(model)
for it in range(3):
    x = torch.randn(8, 16, device=device)
    y = torch.randint(0, 4, (8,), device=device)
    with torch.autocast(device_type="cuda", dtype=dtype):
        loss = F.cross_entropy(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().stream_id
    print(f"iter {it}: loss {loss.item():.4f} on {x.device} {dtype} stream {stream}")
"""


def test_from_cuda_runs_a_cuda_script_that_compiles_with_the_default_backend(tmp_path):
    # Dynamo's guards read torch.cuda.streams.Stream and trace from_cuda's TorchFunctionMode.
    (tmp_path / "train.py").write_text(COMPILED_CUDA_SCRIPT)
    compiled = openreg_lab("run", "--from-cuda", "--trace", "c.trace", "train.py", cwd=tmp_path, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    eager = openreg_lab("run", "--from-cuda", "train.py", "--no-compile", cwd=tmp_path, timeout=300)
    assert eager.returncode == 0, eager.stderr
    lines = compiled.stdout.splitlines()
    assert [line.split(" loss ")[0] for line in lines] == ["iter 0:", "iter 1:", "iter 2:"]
    assert all(line.endswith("on openreg:0 torch.bfloat16 stream 0") for line in lines)
    got = [float(line.split()[3]) for line in lines]
    want = [float(line.split()[3]) for line in eager.stdout.splitlines()]
    assert got == pytest.approx(want, rel=2e-2)  # bfloat16 autocast, compiled vs eager
    ev = lab.load_trace(tmp_path / "c.trace").events
    compiles = ev[ev.kind == "compile"]
    # Dynamo is imported inside the trace: its first compilation is recorded too (from its start).
    assert compiles.name.iloc[0] == "compile 0/0" and (compiles.dur_ns > 0).all()
    assert compiles.name.str.fullmatch(r"compile \d+/0( backward)?").all(), compiles.name.tolist()
    calls = ev[(ev.kind == "compiled") & ev.fused.isna()].name.tolist()
    assert calls == ["graph 0/0 forward", "graph 0/0 backward"] * 3
    # the totals count the generated kernels, and the ops compiled code called as top-level ops
    kernels = ev[(ev.kind == "compiled") & ev.fused.notna()]
    line = next(x for x in compiled.stderr.splitlines() if x.startswith("compiled kernels"))
    assert int(line.split()[2]) == len(kernels) > 0
    addmm = ev[(ev.name == "aten::addmm.out") & ev.parent.isin(ev[ev.kind == "compiled"].id)]
    assert len(addmm) == 3 * 2  # two Linear layers a forward, three steps
    top = next(x for x in compiled.stderr.splitlines() if x.startswith("ops (top level)"))
    ops = ev[ev.kind == "op"]
    from_compiled = ops.parent.isin(ev[ev.kind.isin(["compiled", "compile"])].id)
    assert from_compiled.sum() > len(addmm)
    assert int(top.split()[3]) == int((ops.parent == -1).sum() + from_compiled.sum())


def _losses(stdout: str) -> list[tuple[int, str]]:
    epochs = [line.split() for line in stdout.splitlines() if line.startswith("epoch")]
    return [(int(words[1]), words[3]) for words in epochs]


def test_the_example_runs_through_run(tmp_path):
    p = openreg_lab("run", "--stack", "-m", "openreg_lab.examples.train_lm", "--steps", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "trained 2 steps" in p.stdout
    # The causal mask's triu and clipping's linalg_vector_norm are native (native/Mask.cpp,
    # native/Norm.cpp): nothing falls back.
    assert "No op fell back to the CPU" in p.stderr and "no op fell back to the CPU" in p.stderr
    assert "top fallbacks" not in p.stderr
    assert "autocast casts" in p.stderr


def test_run_steps_records_only_the_chosen_training_steps_and_says_what_it_skipped(tmp_path):
    p = openreg_lab(
        "run", "--steps", "1:2", "--trace", "s.trace", "-m", "openreg_lab.examples.train_lm", "--steps", "4",
        cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    t = lab.load_trace(tmp_path / "s.trace")
    assert t.steps()["step"].tolist() == [1, 2]
    assert t.skipped is not None and t.skipped.startswith("recorded steps 1 to 2 of the 4 the block ran")
    assert f"warning: only chosen steps were recorded: {t.skipped}" in p.stderr
    # The verdict comes first and quotes the first step apart from the median of the others.
    assert p.stderr.index("No op fell back to the CPU") < p.stderr.index("ops (top level)")
    assert "step 1 took " in p.stderr and "; the step after it: " in p.stderr
    bad = openreg_lab("run", "--steps", "8:5", "-m", "openreg_lab.examples.train_lm", cwd=tmp_path)
    assert bad.returncode == 2 and "expected FIRST:LAST or one step number" in bad.stderr


def test_bad_arguments_exit_2_with_one_line_in_a_real_process(tmp_path):
    p = openreg_lab("run", "--policy", "allow", "missing.py", "--epochs", "1", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr == "python -m openreg_lab run: error: no such script: missing.py\n"
    assert p.stdout == ""


# Needs Trace.to_html, which the views layer provides.
def test_html_report_holds_the_run_info(script, tmp_path):
    options = ["--html", "report.html", "--profile", "mps", "--policy", "warn"]
    p = openreg_lab("run", *options, script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "report.html").read_text()
    for value in (
        f"python -m openreg_lab run --html report.html --profile mps --policy warn {script}",
        torch.__version__,
        "2 openreg",
        "mps",
        "warn",
        "no autocast casts recorded",
    ):
        assert value in html, value
    assert f"wrote the report to {tmp_path / 'report.html'}" in p.stderr
