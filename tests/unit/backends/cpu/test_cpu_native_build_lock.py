"""The native kernels' build lock: a process killed while it loads or builds them (torch's `lock` file left in
the build folder) does not leave every later load on the machine waiting forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

from tgi.backends.cpu.native.build_lock import TORCH_LOCK_NAME, build_lock

HOLDER = textwrap.dedent(
    """
    import pathlib, sys, time
    from tgi.backends.cpu.native.build_lock import build_lock, TORCH_LOCK_NAME
    folder = pathlib.Path(sys.argv[1])
    with build_lock(str(folder)):
        (folder / TORCH_LOCK_NAME).touch()  # inside torch's load, as it would be
        print("held", flush=True)
        time.sleep(600)
    """
)


def test_a_lock_file_a_dead_process_left_is_removed(tmp_path):
    (tmp_path / TORCH_LOCK_NAME).touch()
    with build_lock(str(tmp_path)):
        assert not (tmp_path / TORCH_LOCK_NAME).exists()


def test_a_live_holder_is_waited_for_and_its_death_lets_the_next_one_in(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        entered = threading.Event()

        def enter():
            with build_lock(str(tmp_path)):
                entered.set()

        waiter = threading.Thread(target=enter, daemon=True)
        waiter.start()
        assert not entered.wait(0.5), "entered while a live process held the lock"
        assert (tmp_path / TORCH_LOCK_NAME).exists()  # a live holder's file is left alone
        os.kill(holder.pid, signal.SIGKILL)  # no exit handler runs: the file stays behind
        assert entered.wait(10), "the lock of a killed process was not released"
        waiter.join(10)
        assert not (tmp_path / TORCH_LOCK_NAME).exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_kernels_load_although_a_killed_process_left_the_build_folder_locked():
    """The real build folder, in a fresh process: the library loads (no rebuild: `make install` built it)."""
    script = textwrap.dedent(
        """
        import pathlib
        from tgi.backends.cpu import native
        from tgi.backends.cpu.native import build
        folder = build.build_dir(build.source_digest())
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "lock").touch()
        native.load()
        assert not (folder / "lock").exists()
        print("loaded")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "loaded", done.stderr[-3000:]
