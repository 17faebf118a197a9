"""Shared test set-up: data comes from ../shared/data unless TURNRL_DATA_DIR says otherwise."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("TURNRL_DATA_DIR", str(SHARED_DATA))
# Never reach for the hub from tests: a missing file must fail fast with our message.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Ray's log monitor (one per cluster) looks for new log files every 0.1 s while it has fewer than a thousand, and
# every 0.5 s past that; the tests' clusters send no worker output to a driver (log_to_driver=False; only the GPU
# test's does, whose output then shows up to 5 s late), so the search only takes CPU (the monitors took 20
# CPU-seconds over the suite; searching every 5 s, the first time 5 s after the start, halves an idle one's)
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
os.environ.setdefault("LOG_NAME_UPDATE_INTERVAL_S", "5")
# Under pytest-xdist (scripts/test.sh runs the suite in 2 processes), each process takes its share of the cores for
# torch: two processes with a thread per core each would fight over them (torch's threads spin while they wait).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.fixture
def data_dir() -> Path:
    """The shared data folder (GSM8K, MATH-500, HotPotQA)."""
    path = Path(os.environ["TURNRL_DATA_DIR"])
    assert (path / "gsm8k" / "test.jsonl").is_file(), f"shared data missing at {path}"
    return path


@pytest.fixture
def one_thread():
    """Torch on one thread for the test: tiny models train fastest so (and do not fight a busy machine's other
    processes for cores), and reductions run in a fixed order (the golden trace was recorded so)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def sigint_raises():
    """Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` in this process, and the commands a test starts take it as from a
    terminal, also when the suite itself runs with SIGINT ignored (a script's ``cmd &`` starts it so, and an ignored
    signal is inherited: the tests that send SIGINT would then see nothing happen)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # a handled signal is reset to default on exec
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture
def trainer_of():
    """``trainer_of(cfg, tok=None, model=None, **kwargs)``: a :class:`Trainer` of ``cfg`` on a fresh tiny model
    (tests/tiny_trainer.py's ``tiny_trainer``); every trainer built is closed when the test ends, however it ends
    (its rollout workers, sandboxes and servers with it)."""
    from tiny_trainer import tiny_trainer

    made = []

    def build(cfg, tok=None, model=None, **kwargs):
        made.append(tiny_trainer(cfg, tok, model, **kwargs))
        return made[-1]

    yield build
    for trainer in made:
        trainer.close()


#: the GCS address of the local cluster ray_cluster started in this process (kept from module to module)
_LOCAL_RAY: dict[str, str] = {}


def _ours(ray) -> bool:
    """Whether this process is connected to the local cluster ray_cluster started (not to a cluster a module joined
    or started itself, and not disconnected)."""
    return ray.is_initialized() and ray.get_runtime_context().gcs_address == _LOCAL_RAY.get("address")


@pytest.fixture(scope="session")
def _local_ray():
    """Shuts down, at the end of the session, the local cluster that ray_cluster keeps between modules."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and _ours(ray):
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster(_local_ray):
    """A real local Ray cluster of 2 CPUs for the module's tests, with nothing else on it: started by the first module
    that asks for one and kept for the next modules of this process (a start and a shutdown take seconds each);
    started again after a module that left it (shut it down, or joined another cluster) or that left actors holding
    its CPUs; shut down at the end of the session. ``TURNRL_TEST_PID`` names the test's own process (``toy_envs``'
    environments that build only there make a rollout worker that builds them die at start)."""
    ray = pytest.importorskip("ray")
    from turnrl.rl.placement.cluster import LOCAL_SYSTEM_CONFIG

    os.environ["TURNRL_TEST_PID"] = str(os.getpid())
    if not _ours(ray):
        if ray.is_initialized():  # an earlier module's connection (another size of cluster, or a joined one)
            ray.shutdown()
        # address="local": a cluster of its own, never one that RAY_ADDRESS or /tmp/ray/ray_current_cluster names
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _system_config=LOCAL_SYSTEM_CONFIG,  # as turnrl's own local cluster (cluster.connect)
        )
        _LOCAL_RAY["address"] = ray.get_runtime_context().gcs_address
    yield ray
    if _ours(ray):  # kept for the next module, unless actors still hold CPUs once killed ones have let go
        deadline = time.monotonic() + 5
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        if ray.available_resources().get("CPU", 0) < 2:
            ray.shutdown()


SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")
MODULE_SECONDS = Path(__file__).with_name("module_seconds.txt")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests tests/slow_tests.txt lists (written by scripts/slow_tests.py from a timed run) ``slow``, so that
    ``-m "not slow"`` — `bash scripts/test.sh --fast` — leaves them out; the full suite runs them all.

    Under pytest-xdist, the modules come longest first (tests/module_seconds.txt, from the same timed run; each
    module's tests in their order): scripts/test.sh has xdist hand them out in that order (--no-loadscope-reorder,
    not by their number of tests), so that the last ones are short and both processes finish together."""
    if os.environ.get("PYTEST_XDIST_WORKER") and MODULE_SECONDS.is_file():
        seconds = {}
        for line in MODULE_SECONDS.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                t, path = line.split(maxsplit=1)
                seconds[path] = float(t)
        items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))  # (stable: a module's order kept)
    if not SLOW_TESTS.is_file():
        return
    slow = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
