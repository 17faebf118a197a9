"""The attack suite: untrusted code must never touch the host. Each attack is contained, reported, and leaves
nothing running. Keep it growing."""

import os
import subprocess
import time

import pytest

from turnrl.tools.sandbox import LocalSandbox

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sandbox():
    return LocalSandbox(cpu_seconds=2, memory_mb=256, file_size_mb=8, disk_mb=32, max_processes=16)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _another_workers(pid: int) -> bool:
    """Whether `pid` descends from a sibling of this process (another pytest-xdist worker running its own
    sandboxes at the same moment), rather than from this process or from init (where an escaped process lands)."""
    me, parent = os.getpid(), os.getppid()
    while pid and pid > 1:
        up = _parent(pid)
        if pid != me and up == parent and not _sandboxed(pid):
            return True
        pid = up
    return False


def _sandboxed(pid: int) -> bool:
    """A sandbox's own process (bubblewrap or the code it runs), which may have been re-parented anywhere."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().replace(b"\0", b" ")
    except OSError:
        return False
    return b"bwrap" in args or b"main.py" in args


def leftovers(tag: str) -> list[str]:
    """Processes matching `tag` that this test's sandboxes left running (another worker's live sandboxes are not
    counted: with two xdist workers, the other may be running code at the same moment)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        if tag in args and "ps -eo" not in args and not _another_workers(int(pid)):
            found.append(args.strip())
    return found


def test_the_leftover_check_sees_an_escaped_process():
    """The check the resource tests rely on finds a process that outlived its parent (re-parented to init)."""
    subprocess.run(["sh", "-c", "sleep 4244 >/dev/null 2>&1 &"], timeout=10)
    try:
        # the background child is `sh -c …` until it has exec'd sleep (seen once in the whole suite): wait up to 2 s
        deadline = time.monotonic() + 2
        while leftovers("sleep 4244") != ["sleep 4244"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers("sleep 4244") == ["sleep 4244"]
    finally:
        subprocess.run(["pkill", "-f", "sleep 4244"], timeout=10)
    assert leftovers("sleep 4244") == [] or (time.sleep(0.5) or leftovers("sleep 4244") == [])


# ---- network ----


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)",
        "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)",
        "import socket\nprint(socket.gethostbyname('example.com'))",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('8.8.8.8', 53))",
    ],
)
def test_no_network(sandbox, code):
    r = sandbox.run(code, timeout=10)
    assert r.exit_code != 0 and not r.timed_out
    assert any(s in r.stderr for s in ("Network is unreachable", "name resolution", "Connection refused", "URLError"))


def test_loopback_of_the_host_is_not_reachable(sandbox):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    hits = []
    threading.Thread(target=lambda: hits.append(srv.accept()), daemon=True).start()
    r = sandbox.run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)", timeout=10)
    srv.close()
    assert r.exit_code != 0 and "Connection refused" in r.stderr and not hits


# ---- reading and writing the host ----


@pytest.mark.parametrize(
    "path",
    [
        os.path.expanduser("~/.bashrc"),
        os.path.abspath(__file__),
        "/etc/passwd",
        "/etc/shadow",
        "/root/.cache/turnrl",
        os.environ.get("TURNRL_DATA_DIR", "/work"),
    ],
)
def test_host_files_are_invisible(sandbox, path):
    r = sandbox.run(f"import os\nprint(os.path.exists({path!r}))\nprint(open({path!r}).read()[:50])", timeout=10)
    assert r.stdout.startswith("False") and r.exit_code == 1


def test_host_environment_is_not_passed(sandbox, monkeypatch):
    monkeypatch.setenv("TURNRL_SECRET_TOKEN", "hunter2")
    r = sandbox.run("import os\nprint(open('/proc/1/environ').read())\nprint(dict(os.environ))", timeout=10)
    assert "hunter2" not in r.stdout and "TURNRL_SECRET_TOKEN" not in r.stdout and r.exit_code == 0


def test_proc_shows_only_the_sandbox(sandbox):
    r = sandbox.run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))", timeout=10)
    pids = eval(r.stdout)  # a list of ints we printed
    assert max(pids) < 10  # a fresh PID namespace: the host's processes are not there


@pytest.mark.parametrize("target", ["/usr/evil.py", "/tmp/../usr/x", "/bin/x"])
def test_writes_outside_the_scratch_dir_fail(sandbox, target):
    r = sandbox.run(f"open({target!r}, 'w').write('x')", timeout=10)
    assert r.exit_code == 1 and (
        "Read-only file system" in r.stderr or "Permission denied" in r.stderr or "No such file" in r.stderr
    )
    assert not os.path.exists(target)


def test_kernel_settings_cannot_be_changed(sandbox):
    before = open("/proc/sys/kernel/hostname").read()
    r = sandbox.run("open('/proc/sys/kernel/hostname', 'w').write('pwned')", timeout=10)
    assert r.exit_code == 1 and open("/proc/sys/kernel/hostname").read() == before


def test_scratch_is_fresh_and_private_per_run(sandbox):
    r1 = sandbox.run("open('left.txt', 'w').write('secret'); open('/tmp/t', 'w').write('x')", timeout=10)
    r2 = sandbox.run("import os\nprint(sorted(os.listdir('.')), os.listdir('/tmp'))", timeout=10)
    assert r1.ok and r2.stdout.strip() == "['main.py'] []"


def test_symlink_tricks_stay_inside(sandbox):
    code = (
        "import os\nos.symlink('/root', 'r')\nos.symlink('/etc/passwd', 'p')\n"
        "print(os.path.exists('r/.bashrc'), os.path.exists('p'))"
    )
    r = sandbox.run(code, timeout=10)
    assert r.stdout.strip() == "False False"


def test_files_cannot_escape():
    sb = LocalSandbox()
    for bad in ["../x.py", "/etc/x", "a/../../x", "main.py"]:
        with pytest.raises(ValueError):
            sb.run("print(1)", files={bad: "x"})


# ---- resources ----


def test_fork_bomb_is_contained(sandbox):
    r = sandbox.run("import os\nwhile True:\n    os.fork()", timeout=20)
    assert "process limit" in (r.error or "")
    time.sleep(0.2)
    # the bomb's processes are copies of the sandboxed interpreter running main.py (the code is never on a command line)
    assert leftovers(" -I main.py") == []


def test_memory_bomb(sandbox):
    r = sandbox.run("x = bytearray(4 * 1024**3)", timeout=10)
    assert r.error and "memory limit" in r.error


def test_cpu_loop(sandbox):
    r = sandbox.run("while True:\n    pass", timeout=20)
    assert r.error and "CPU time limit" in r.error and not r.timed_out and r.duration < 10


def test_sleep_past_the_timeout(sandbox):
    r = sandbox.run("import time\nprint('started', flush=True)\ntime.sleep(60)", timeout=1)
    assert r.timed_out and r.exit_code is None and "wall-clock timeout" in r.error
    assert r.stdout == "started\n" and r.duration < 5


def test_output_flood_is_capped_and_killed(sandbox):
    r = sandbox.run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout=20)
    assert r.stdout_truncated and "output limit" in r.error and len(r.stdout) < 70_000


def test_large_output_is_truncated_and_marked(sandbox):
    r = sandbox.run("print('y' * 200_000)", timeout=10)
    assert r.ok and r.stdout_truncated and "output truncated" in r.stdout and len(r.stdout) < 70_000


def test_huge_file(sandbox):
    r = sandbox.run("open('f', 'wb').write(b'0' * (64 * 1024 * 1024))", timeout=10)
    assert r.error and "file size limit" in r.error


def test_disk_filling_with_many_files(sandbox):
    code = "for i in range(100):\n    open(f'f{i}', 'wb').write(b'0' * (4 * 1024 * 1024))"
    r = sandbox.run(code, timeout=20)
    assert r.exit_code != 0 and "disk limit" in (r.error or "")


def test_background_and_zombie_processes_die_with_the_run(sandbox):
    code = (
        "import subprocess, os\n"
        "subprocess.Popen(['sleep', '4242'])\n"
        "if os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(4243)\n"
        "print('spawned')"
    )
    r = sandbox.run(code, timeout=10)
    assert r.stdout.strip() == "spawned"
    time.sleep(0.3)
    assert leftovers("sleep 4242") == [] and leftovers("4243") == []


def test_signals_cannot_reach_the_parent(sandbox):
    code = "import os, signal\nfor pid in (os.getppid(), 1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except Exception as e:\n        print(type(e).__name__)\nprint('alive')"
    r = sandbox.run(code, timeout=10)
    assert "alive" in r.stdout or r.exit_code is not None
    assert sandbox.run("print('still serving')", timeout=10).stdout == "still serving\n"


def test_many_concurrent_runs_are_isolated():
    import asyncio

    sb = LocalSandbox(max_concurrency=4)
    code = "import os, sys\nopen('mine.txt', 'w').write(sys.stdin.read())\nprint(sorted(os.listdir('.')), open('mine.txt').read())"

    async def main():
        return await asyncio.gather(*(sb.arun(code, stdin=str(i), timeout=20) for i in range(12)))

    results = asyncio.run(main())
    assert [r.stdout.strip() for r in results] == [f"['main.py', 'mine.txt'] {i}" for i in range(12)]


def test_exit_status_and_exceptions_are_reported(sandbox):
    r = sandbox.run("import sys\nsys.exit(3)", timeout=10)
    assert r.exit_code == 3 and r.error is None
    r = sandbox.run("1/0", timeout=10)
    assert r.exit_code == 1 and "ZeroDivisionError" in r.stderr and r.error is None


def test_missing_bubblewrap_refuses_unless_weak(monkeypatch):
    import shutil

    from turnrl.tools.sandbox import SandboxUnavailable

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap.*allow_weak=True"):
        LocalSandbox()
    weak = LocalSandbox(allow_weak=True, cpu_seconds=2)
    assert weak.run("print(6 * 7)", timeout=10).stdout == "42\n"
    assert "CPU time limit" in weak.run("while True:\n    pass", timeout=20).error


def test_without_proc_a_program_cannot_read_its_own_memory():
    sb = LocalSandbox(cpu_seconds=2, proc=False)
    r = sb.run(
        "import os\nfor p in ('/proc/self/mem', '/proc/self/fd/0', '/dev/fd/0', '/dev/stdin'):\n"
        "    print(p, os.path.exists(p))\nprint(os.getpid(), os.cpu_count() > 0)",
        timeout=10,
    )
    assert r.ok and "True" not in r.stdout.splitlines()[0] and r.stdout.count("False") == 4, r


def test_code_tests_run_without_proc():
    from turnrl.tools.sandbox.local import default_test_sandbox
    from turnrl.verifiers.code import run_tests

    assert default_test_sandbox().proc is False
    v = run_tests("import os\ndef f():\n    return os.path.exists('/proc/self')\n", ["assert f() is False"])
    assert v.correct, v
