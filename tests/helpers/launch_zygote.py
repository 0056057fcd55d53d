"""`tgi launch` processes forked from a process that has already imported what a launch imports.

A test's `tgi launch` spends ~7 of its ~10 s importing torch, transformers, FastAPI and tgi before it reads its
flags, and the suite starts ~40 of them. A zygote (one per test worker, started at its first launch) imports
all of that once, then forks a child for each launch, and the child runs the command line exactly as
`python -m tgi.server.cli.main launch ...` would (`tgi.server.cli.main.main(argv)`, its exit code the
process's, the interpreter's exit hooks run) with the launch's environment, working folder and log files.
The zygote forks with one thread (checked: a fork beside other threads could inherit a held lock).

Libraries read some variables when imported (`HF_HOME`, `HF_ENDPOINT`, `HF_HUB_OFFLINE`, `TGI_JAX_PLATFORM`,
...), so a zygote forks only launches in the environment it was started in: the worker keeps one zygote for
its own environment (`launch_env()`) and up to `OTHER_ENVIRONMENTS` for others (a module's fake hub and its
offline twin), the one used least recently stopped for a new one. A launch of several processes (shards,
pipeline stages) forks too: its ranks start from multiprocessing's fork server, a new interpreter, which
imports `__main__` by name, and the child's `__main__` is `tgi.server.cli.main`, as under `python -m`.

The child is the zygote's, not the test's: `ZygoteProcess` answers as `subprocess.Popen` does (pid, poll,
wait, send_signal, terminate, kill, returncode), asking the zygote for the exit status, and the child's CPU
time is added to `reaped_cpu_seconds()` when it is reaped, for the suite's CPU figures. `TGI_TEST_ZYGOTE=0`
turns it off.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time

#: what the zygote imports before it forks: every module a default `tgi launch` imports before it serves
PRELOAD = (
    "torch",
    "transformers",
    "fastapi",
    "uvicorn",
    "httpx",
    "tgi.server.cli.main",
    "tgi.server.cli.launch",
    "tgi.server.app",
    "tgi.core.engine",
    "tgi.core.async_engine",
    "tgi.core.loading.gguf_loader",
    "tgi.core.tokenization",
    "tgi.backends.cpu.plugin",
    "tgi.backends.cpu.backend",
)

#: how many zygotes of environments other than the worker's own one worker keeps (each holds ~0.5 GB)
OTHER_ENVIRONMENTS = 2

_lock = threading.Lock()
_reaped_cpu = [0.0]


def reaped_cpu_seconds() -> float:
    """User and system CPU seconds of the zygotes' children reaped so far (the suite counts them as its own)."""
    return _reaped_cpu[0]


def enabled() -> bool:
    return os.environ.get("TGI_TEST_ZYGOTE", "1") != "0"


def launch_env() -> dict[str, str]:
    """This process's environment without the variables that would set a launch's flags: the zygote's."""
    return {k: v for k, v in os.environ.items() if k not in ("PORT", "HOSTNAME", "API_KEY", "MODEL_ID")}


class _Zygote:
    """One zygote process: it imported `PRELOAD` in `env` and forks launches in `env` only."""

    def __init__(self, env: dict[str, str], log: str, header: str) -> None:
        self.env = env
        self.log = log
        self.running: set[int] = set()  # the children not yet reaped
        self.children_cpu = 0.0  # of those reaped
        err = open(log, "w")  # noqa: SIM115 - the zygote's own log, open for its lifetime
        err.write(header + "\n")
        err.flush()
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            text=True,
        )
        self.request({"op": "ready"})  # it has imported PRELOAD

    def request(self, message: dict) -> dict:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the launch zygote exited with {self.proc.wait()} (its log: {self.log})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the launch zygote: {answer['error']}")
        return answer

    def stop(self) -> None:
        """End the zygote (its loop ends at end of input); children it forked run on, reaped by init. Its CPU
        time, once reaped, is this process's children's, and includes the children it reaped: those were
        counted as each was reaped (`reaped_cpu_seconds`), and are taken off here."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            _reaped_cpu[0] -= self.children_cpu


_zygotes: dict[tuple, _Zygote] = {}  # by environment, the least recently used first

#: variables that differ between launches of one environment and that nothing a launch imports reads at import
#: (a fork still gets the launch's value): pytest names the running test in PYTEST_CURRENT_TEST; torch's
#: inductor sets its default cache folder in TORCHINDUCTOR_CACHE_DIR the first time a test compiles (it reads
#: it when it compiles); scikit-learn's import (a test's sentence-transformers) sets two of Intel's OpenMP
#: settings, KMP_*, which torch's wheels (GNU OpenMP) never read
_NOT_READ_AT_IMPORT = (
    "PYTEST_CURRENT_TEST",
    "TORCHINDUCTOR_CACHE_DIR",
    "KMP_DUPLICATE_LIB_OK",
    "KMP_INIT_AT_FORK",
)


def _key(env: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in _NOT_READ_AT_IMPORT))


def _stop_all() -> None:
    for zygote in _zygotes.values():
        zygote.stop()


atexit.register(_stop_all)


def _started_for(key: tuple, own: tuple) -> str:
    """The first line of a zygote's log: how its environment differs from the worker's and the other zygotes'."""

    def differ(a: tuple, b: tuple) -> list[str]:
        x, y = dict(a), dict(b)
        return sorted(n for n in x.keys() | y.keys() if x.get(n) != y.get(n))

    others = "; ".join(f"from another zygote's in {differ(k, key)}" for k in _zygotes)
    return f"a zygote of an environment that differs from the worker's in {differ(own, key)}; {others}"


def _zygote_for(env: dict[str, str], log: str) -> _Zygote:
    """The zygote of `env` (started now if there is none), kept with `OTHER_ENVIRONMENTS` others at most (the
    least recently used of those with no child running are stopped)."""
    key, own = _key(env), _key(launch_env())
    zygote = _zygotes.pop(key, None)
    if zygote is None:
        zygote = _Zygote(env, log, _started_for(key, own))
    _zygotes[key] = zygote  # now the most recently used
    others = [k for k in _zygotes if k != own]
    # never the one asked for, nor one with a child running (it keeps answering for it)
    idle = [k for k in others if k != key and not _zygotes[k].running]
    for k in idle[: max(0, len(others) - OTHER_ENVIRONMENTS)]:
        _zygotes.pop(k).stop()
    return zygote


def start(argv: list[str], env: dict[str, str], stdout: str, stderr: str) -> subprocess.Popen | ZygoteProcess:
    """`python -m tgi.server.cli.main *argv` in `env`, its output in the files `stdout` and `stderr` (the same
    path: one log of both, as `Popen(stderr=STDOUT)` writes it): a fork of this worker's zygote of `env` (started
    now if there is none), or a new interpreter where the zygote is off (`TGI_TEST_ZYGOTE=0`)."""
    if not enabled():
        cmd = [sys.executable, "-m", "tgi.server.cli.main", *argv]
        with open(stdout, "w") as out:
            if stderr == stdout:
                return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
            with open(stderr, "w") as err:
                return subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
    for path in {stdout, stderr}:  # there when `start` returns, as Popen's files are: a test may read at once
        open(path, "w").close()
    with _lock:
        zygote = _zygote_for(env, stderr + ".zygote.log")
        message = {"argv": argv, "env": env, "cwd": os.getcwd(), "stdout": stdout, "stderr": stderr}
        answer = zygote.request({"op": "launch", **message})
        zygote.running.add(answer["pid"])
    return ZygoteProcess(answer["pid"], argv, zygote)


def run(argv: list[str], env: dict[str, str], timeout: float, folder: str) -> subprocess.CompletedProcess:
    """`python -m tgi.server.cli.main *argv` in `env` to its end (`start`), as `subprocess.run(...,
    capture_output=True, text=True, timeout=timeout)` gives it (its output kept in `folder`)."""
    out, err = os.path.join(folder, "command.out"), os.path.join(folder, "command.err")
    proc = start(argv, env, out, err)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    with open(out) as o, open(err) as e:
        return subprocess.CompletedProcess(proc.args, proc.returncode, o.read(), e.read())


class ZygoteProcess:
    """A forked launch, answering as `subprocess.Popen` does."""

    def __init__(self, pid: int, args: list[str], zygote: _Zygote) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            with _lock:
                answer = self._zygote.request({"op": "poll", "pid": self.pid})
            if answer["returncode"] is not None:
                self.returncode = answer["returncode"]
                self._zygote.running.discard(self.pid)
                self._zygote.children_cpu += answer["cpu_seconds"]
                _reaped_cpu[0] += answer["cpu_seconds"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# -- the zygote ---------------------------------------------------------------------------------------------


def _child(message: dict, channel: list[int]) -> None:
    """In the forked child: become `python -m tgi.server.cli.main *argv` and exit with its code."""
    import atexit as child_atexit
    import traceback

    for fd in channel:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(os.open(message["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
    if message["stderr"] == message["stdout"]:  # one log, as Popen(stdout=f, stderr=STDOUT) writes it
        os.dup2(1, 2)
    else:
        os.dup2(os.open(message["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - as a launch's stdout to a file
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    # the handlers a new interpreter starts with: CPython ignores SIGPIPE (a write to a closed pipe raises
    # BrokenPipeError, which a node that loses a rank handles: under SIG_DFL it would die of the signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.chdir(message["cwd"])
    os.environ.clear()
    os.environ.update(message["env"])
    import tgi.server.cli.main as cli

    sys.argv = [cli.__file__, *message["argv"]]
    sys.modules["__main__"] = cli  # as `python -m` makes it
    code = 1
    try:
        code = cli.main(message["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            child_atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _serve() -> None:
    """The zygote's loop: JSON requests on stdin, one JSON answer a line on stdout, until end of input."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    protocol_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # nothing but answers on the protocol's pipe
    children: dict[int, tuple[int, float] | None] = {}
    for line in sys.stdin:
        message = json.loads(line)
        op = message["op"]
        try:
            if op == "ready":
                answer: dict = {"ready": True}
            elif op == "launch":
                threads = len(os.listdir("/proc/self/task"))
                if threads != 1:
                    raise RuntimeError(f"{threads} threads: a fork now could inherit a held lock")
                pid = os.fork()
                if pid == 0:
                    _child(message, [0, protocol_out.fileno()])
                children[pid] = None
                answer = {"pid": pid}
            elif op == "poll":
                pid = message["pid"]
                if children.get(pid) is None:
                    done, status, usage = os.wait4(pid, os.WNOHANG)
                    if done:
                        children[pid] = (os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime)
                state = children[pid]
                answer = {"returncode": None}
                if state is not None:
                    answer = {"returncode": state[0], "cpu_seconds": state[1]}
            else:
                answer = {"error": f"unknown request {op!r}"}
        except Exception as e:  # the answer says it; the zygote goes on
            answer = {"error": f"{type(e).__name__}: {e}"}
        protocol_out.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    _serve()
