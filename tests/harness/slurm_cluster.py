"""A one-node Slurm cluster on localhost for the end-to-end test of `launch`.

One directory holds ``slurm.conf`` (select/cons_tres, proctrack/linuxproc,
task/none, this node's CPUs and memory as ``slurmd -C`` reports them), the
controller's state and each daemon's log; the munge key and socket sit in a
directory of their own, which user ``munge`` can reach. munged runs as
``munge``; slurmctld and slurmd run in the foreground (``-D``) as root. Ports
are picked free, so a second cluster (or a system one) is not disturbed.
Every job is cancelled and every daemon started is stopped by its pid. Slurm
commands find the cluster through ``SLURM_CONF``.

There is no accounting database: ``sacct`` fails here, and the test shows
that `launch` does not depend on it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "srun", "scancel")
START_TIMEOUT_S = 60


def why_not_here() -> str | None:
    """One line saying why this machine cannot start a cluster, or None."""
    if os.geteuid() != 0:
        return "starting slurmctld, slurmd and munged needs root"
    missing = [name for name in TOOLS if shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if missing:
        return (f"{', '.join(missing)} not installed (`make test` installs slurm-wlm and munge as root with "
                f"apt-get)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no user munge (the munge package creates it)"
    return None


def _tool(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def node_line() -> str:
    """``NodeName=... CPUs=... RealMemory=...`` of this machine, from ``slurmd -C``."""
    out = subprocess.run([_tool("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0].strip()


def slurm_conf(root: Path, host: str, node: str, munge_socket: Path) -> str:
    ctld_port, slurmd_port = _free_ports(2)
    return "\n".join([
        "ClusterName=scatterbench-test",
        f"SlurmctldHost={host}",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        f"{node} State=UNKNOWN",
        f"PartitionName=debug Nodes={node.split()[0].split('=')[1]} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _wait_for(predicate, what: str, processes: dict, logs: dict) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} while waiting for {what}: "
                                   f"{_tail(logs.get(name))}")
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {START_TIMEOUT_S} s waiting for {what}")


def _tail(path: Path | None) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:])


def _stop(processes: dict) -> None:
    """SIGTERM to each daemon by its pid, last started first; SIGKILL after 10 s."""
    for name, process in reversed(list(processes.items())):
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()


@contextmanager
def local_cluster(root: Path):
    """Starts munged, slurmctld and slurmd under ``root``; yields the
    environment (``SLURM_CONF``) for Slurm commands and clients; stops them."""
    root = Path(root)
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    # munged runs as user munge, who must reach its directory: not under
    # pytest's private (0700) temporary root, so a directory of its own.
    munge_dir = Path(tempfile.mkdtemp(prefix="scatterbench-munge-"))
    munge_user = pwd.getpwnam("munge")
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(munge_dir, 0o755)  # munged wants its socket's directory searchable by every client
    os.chmod(key, 0o400)
    for path in (munge_dir, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    munge_socket = munge_dir / "munge.socket"
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host, node_line(), munge_socket))
    env = dict(os.environ, SLURM_CONF=str(conf))
    logs = {"munged": munge_dir / "munged.stderr", "slurmctld": root / "slurmctld.log", "slurmd": root / "slurmd.log"}
    processes: dict[str, subprocess.Popen] = {}
    try:
        processes["munged"] = subprocess.Popen(
            [_tool("munged"), "--foreground", f"--key-file={key}", f"--socket={munge_socket}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={logs['munged']}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            user=munge_user.pw_uid, group=munge_user.pw_gid, stdout=subprocess.DEVNULL,
            stderr=open(munge_dir / "munged.stderr", "wb"))
        _wait_for(munge_socket.exists, "munged's socket", processes, logs)
        for daemon in ("slurmctld", "slurmd"):
            processes[daemon] = subprocess.Popen([_tool(daemon), "-D", "-f", str(conf)], env=env,
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_for(lambda: _node_idle(env), "the node to come up idle", processes, logs)
        yield env
    finally:
        if "slurmctld" in processes:
            _drain(env)
        _stop(processes)
        shutil.rmtree(munge_dir, ignore_errors=True)


def _drain(env: dict) -> None:
    """Cancels every job of the cluster and waits (30 s at most) until slurmd
    has ended their steps, so no slurmstepd outlives the daemons."""
    subprocess.run([_tool("scancel"), "--partition=debug"], env=env, capture_output=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        queue = subprocess.run([_tool("squeue"), "--noheader"], env=env, capture_output=True, text=True)
        if queue.returncode != 0 or not queue.stdout.strip():
            return
        time.sleep(0.5)


def _node_idle(env: dict) -> bool:
    out = subprocess.run([_tool("sinfo"), "--noheader", "--format=%T"], env=env, capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip().startswith("idle")
