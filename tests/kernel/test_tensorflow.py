"""Real TensorFlow (CPU build) in real sliced kernels: the hook, logical devices, resize, OOM.

One kernel (a 1/4 slice with ``logical_devices=2``) is shared by most tests; the import-form
tests need a fresh kernel each, since the hook fires once per process.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from jupyter_vgpu.slices import Slice
from jupyter_vgpu.slices.reports import add_notice, read_report
from jupyter_vgpu.units import GiB

from .harness import Kernel, Outcome, Workspace, module_kernel

pytestmark = pytest.mark.tensorflow

ANSI = re.compile(r"\x1b\[[0-9;]*m")

USER_HANDLER = """
def _my_handler(shell, etype, value, tb, tb_offset=None):
    print("my handler saw", etype.__name__)
get_ipython().set_custom_exc((LookupError,), _my_handler)
"""


@dataclass
class Session:
    workspace: Workspace
    slice: Slice
    kernel: Kernel
    before_import: list[str]
    imported: Outcome


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    for workspace, slice_, kernel in module_kernel(tmp_path_factory, "tensorflow", fraction=0.25, logical_devices=2):
        before = kernel.eval("[m for m in ('tensorflow', 'keras') if m in __import__('sys').modules]")
        assert kernel.run(USER_HANDLER).ok  # a user's own custom exception handler, set before the import
        imported = kernel.run("import tensorflow as tf")
        yield Session(workspace, slice_, kernel, before, imported)


def record(kernel: Kernel, name: str = "tensorflow") -> dict[str, object]:
    return kernel.eval(f"__import__('jupyter_vgpu.kernel.state').kernel.state.current().records[{name!r}].to_dict()")


def test_tensorflow_is_not_imported_until_the_user_imports_it(session: Session) -> None:
    assert session.before_import == []
    assert session.imported.ok, session.imported.error


def test_import_tensorflow_splits_the_cpu_into_the_slices_logical_devices(session: Session) -> None:
    assert record(session.kernel) == {
        "status": "applied",
        "detail": "no GPU visible to TensorFlow: the CPU is split into 2 logical devices (MirroredStrategy: 2 replicas)",
        "preloaded": False,
    }


def test_mirrored_strategy_runs_two_replicas(session: Session) -> None:
    ran = session.kernel.run(
        "strategy = tf.distribute.MirroredStrategy()\n"
        "per_replica = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)"
    )
    assert ran.ok, ran.error
    replicas = "sorted(int(v) for v in strategy.experimental_local_results(per_replica))"
    assert session.kernel.eval(f"[strategy.num_replicas_in_sync, {replicas}]") == [2, [0, 1]]


def test_the_report_tells_the_server_what_was_applied(session: Session) -> None:
    report = read_report(session.workspace.ledger_path, session.slice.id)
    assert report is not None
    assert report["frameworks"]["tensorflow"]["status"] == "applied"


def test_status_shows_what_was_applied_to_tensorflow(session: Session) -> None:
    [bundle] = session.kernel.run("%vgpu").displays
    text = bundle["text/plain"]
    assert re.search(r"\n  TensorFlow +applied: no GPU visible to TensorFlow: the CPU is split into 2", text)
    assert re.search(r"\n  logical devices +2 TensorFlow devices per GPU", text)
    assert re.search(r"\n  tier +cooperative\n", text), text
    assert re.search(r"\n  framework limits +([^\n]*, )?TensorFlow \(applied\)[^\n]*; user code can undo them\n", text), text  # Keras may import JAX too


def test_devices_shows_tensorflows_logical_devices(session: Session) -> None:
    session.kernel.run("tf.constant(1.0) + 1")  # TensorFlow creates its devices at its first op
    [bundle] = session.kernel.run("%vgpu devices").displays
    text = bundle["text/plain"]
    assert "TensorFlow sees" in text
    assert re.search(r"\n  0 +/device:CPU:0 \(logical\)", text)
    assert re.search(r"\n  1 +/device:CPU:1 \(logical\)", text)
    assert re.search(r"Not imported: PyTorch, (JAX, )?CuPy\.", text), text


def test_resize_after_tensorflow_is_imported_says_what_vgpu_says_of_it(workspace: Workspace, start) -> None:
    """The refusal said TensorFlow "was configured" while `%vgpu` said it was skipped (issue 33).
    On simulated GPUs TensorFlow uses no GPU, holds none of the slice, and the resize goes through."""
    slice_ = workspace.reserve(0.25)
    kernel = start(workspace.slice_env(slice_))
    assert kernel.run("import tensorflow as tf; tf.constant(1)").ok  # its runtime has started
    [bundle] = kernel.run("%vgpu").displays
    assert re.search(r"TensorFlow +skipped", bundle["text/plain"]), bundle["text/plain"]
    outcome = kernel.run("%vgpu resize 0.5")
    assert outcome.ok, outcome.stderr
    assert outcome.stdout.startswith(f"Slice {slice_.id} resized from 1/4 GPU (4.0 GiB per GPU) to 1/2 GPU (8.0 GiB per GPU)")
    ledger = workspace.ledger()
    try:
        assert ledger.get(slice_.id).memory_per_gpu == 8 * GiB
    finally:
        ledger.close()
    [bundle] = kernel.run("%vgpu").displays
    assert re.search(r"TensorFlow +skipped", bundle["text/plain"]), bundle["text/plain"]  # as before: nothing to limit


def test_out_of_memory_shows_the_slice_under_the_normal_traceback(session: Session) -> None:
    outcome = session.kernel.run("x = tf.zeros([2**42])")  # 16 TiB: a real ResourceExhaustedError
    assert outcome.reply["content"]["status"] == "error"
    assert outcome.error is not None and outcome.error["ename"] == "ResourceExhaustedError"
    lines = [ANSI.sub("", line) for line in "\n".join(outcome.error["traceback"]).splitlines()]
    ours = lines.index("jupyter-vgpu: TensorFlow ran out of memory on the CPU, not in this kernel's GPU slice. The slice:")
    assert any("OOM when allocating tensor" in line for line in lines[:ours])  # the normal traceback first
    explanation = "\n".join(lines[ours:])
    assert re.search(r"\n  share +1/4 GPU", explanation)
    assert re.search(r"\n  reserved +4.0 GiB per GPU", explanation)
    assert re.search(r"\n  used +[\d.]+ [KMG]?i?B now, .* peak \(simulated: what its frameworks hold in the host's memory", explanation)
    assert "To get a bigger slice:" in explanation
    assert "`%vgpu resize 1/2`" in explanation and "\"Python 3 (1/2 GPU)\"" in explanation
    assert "`jupyter vgpu status`" in explanation


def test_gpu_out_of_memory_says_the_slice_ran_out(session: Session) -> None:
    outcome = session.kernel.run(
        "raise tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating tensor on /device:GPU:0')"
    )
    assert outcome.error is not None
    text = ANSI.sub("", "\n".join(outcome.error["traceback"]))
    assert "jupyter-vgpu: TensorFlow ran out of GPU memory in this kernel's slice." in text


def test_other_errors_keep_their_own_handlers(session: Session) -> None:
    user = session.kernel.run("{}['missing']")
    assert user.stdout.strip() == "my handler saw KeyError"
    plain = session.kernel.run("1 / 0")
    assert plain.error is not None and plain.error["ename"] == "ZeroDivisionError"
    assert "jupyter-vgpu" not in ANSI.sub("", "\n".join(plain.error["traceback"]))


@pytest.mark.parametrize("statement", ["import keras", "from tensorflow import keras"])
def test_the_hook_fires_on_every_spelling_of_the_import(workspace: Workspace, start, statement: str) -> None:
    kernel = start(workspace.slice_env(workspace.reserve(0.25, logical_devices=2)))
    assert kernel.eval("'tensorflow' in __import__('sys').modules") is False
    outcome = kernel.run(statement)
    assert outcome.ok, outcome.error
    assert record(kernel)["status"] == "applied"
    assert kernel.eval("len(__import__('tensorflow').config.list_logical_devices('CPU'))") == 2


def test_tensorflow_imported_before_the_extension_is_fitted_at_its_import(workspace: Workspace, start) -> None:
    # Another IPython extension imports TensorFlow and runs an op before jupyter-vgpu's loads. The
    # start-up hook (jupyter_vgpu_startup.pth) fits it at that import all the same; before it, the
    # devices were made whole and %vgpu could only say "too-late".
    extensions = workspace.root / "extensions"
    extensions.mkdir()
    (extensions / "early_tensorflow.py").write_text(
        "def load_ipython_extension(ip):\n    import tensorflow as tf\n    tf.constant(1.0) + 1\n"
    )
    profile = workspace.ipython_dir / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text("c.InteractiveShellApp.extensions = ['early_tensorflow']\n")
    env = workspace.slice_env(workspace.reserve(0.25, logical_devices=2))
    env["PYTHONPATH"] = str(extensions)
    kernel = start(env)
    got = record(kernel)
    assert got["status"] == "applied" and got["preloaded"] is False, got
    [bundle] = kernel.run("%vgpu").displays
    assert re.search(r"\n  TensorFlow +applied: 2 logical GPUs|\n  TensorFlow +applied: no GPU visible", bundle["text/plain"]), bundle
    assert kernel.eval("len(__import__('tensorflow').config.list_logical_devices('CPU'))") == 2


def test_on_simulated_gpus_vgpu_shows_what_a_real_gpu_would_give(workspace: Workspace, start) -> None:
    # Issue 25: on the demo's simulated GPUs %vgpu said "skipped: TensorFlow sees no GPU" beside
    # "none yet: set when TensorFlow ... is imported"; it now says what the slice gives on a real GPU.
    kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    assert kernel.run("import tensorflow").ok
    [bundle] = kernel.run("%vgpu").displays
    text = ANSI.sub("", bundle["text/plain"])
    assert "On a real GPU, this slice gives (simulated here)" in text, text
    assert re.search(r"\n  TensorFlow +1 logical GPU of 3\.\d GiB on each GPU\n", text), text
    assert re.search(r"\n  JAX +memory fraction 0\.2\d\d of the GPU", text), text
    assert "none yet" not in text and re.search(r"\n  TensorFlow +skipped: ", text), text


#: What the kernel prints of TensorFlow when a burst is asked back on simulated GPUs (issue 49).
TENSORFLOW_ON_SIMULATED_GPUS = (
    "jupyter-vgpu: on a real GPU, TensorFlow cannot give GPU memory back before the kernel restarts (del and gc free "
    "nothing to the GPU); on these simulated GPUs only what the frameworks' tensors hold in the host's memory counts, "
    "so deleting them (del, then gc.collect()) gives it back."
)


def test_a_burst_notice_on_simulated_gpus_says_tensorflows_line_is_of_a_real_gpu(session: Session) -> None:
    """Issue 49: the notice said "del and gc free nothing" beside an example whose `del` did free the
    burst (the simulation counts TensorFlow's tensors): the line says which GPU it speaks of. (Last in
    this module: the notice is shown under the next cells until seen.)"""
    kernel = session.kernel
    assert kernel.run("int(tf.size(tf.ones((1024,))))").ok  # TensorFlow's runtime has started
    now = time.time()
    asked = "tensorflow.ipynb uses 2.0 GiB above its 4.0 GiB request while 1 waiting in line: give it back by 12:00:00."
    add_notice(
        session.workspace.ledger_path, session.slice.id,
        {"id": f"{now}-burst", "t": now, "action": "burst", "stage": "ahead", "message": asked},
    )  # fmt: skip
    shown = ""
    deadline = time.monotonic() + 60
    while TENSORFLOW_ON_SIMULATED_GPUS not in shown:  # the next cell shows it (or the one after, if the thread had it)
        assert time.monotonic() < deadline, f"no TensorFlow line under the cells after the notice: {shown!r}"
        shown += kernel.run("pass").stderr
    assert f"jupyter-vgpu: {asked}" in shown
