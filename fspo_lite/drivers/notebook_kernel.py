"""How the lite job runs one notebook: papermill with the project's kernel manager (`execute_notebook`).

The kernel talks over IPC sockets in a private folder, is not interrupted after its last cell, and runs in its own
process group, which the job's signal handling ends (fspo_lite.drivers.job_control); its progress bars are saved as
text (fspo_lite.progress).
"""

from __future__ import annotations

import os
from pathlib import Path

from fspo_lite.drivers.job_control import register_group
from fspo_lite.progress import headless_progress

ROOT = Path(__file__).resolve().parents[2]


def execute_notebook(source: Path, executed: Path, parameters: dict, progress: bool = False) -> None:
    """Run the notebook under papermill into `executed`, its bars as text saved as done (fspo_lite.progress)."""
    import papermill
    with headless_progress():
        papermill.execute_notebook(str(source), str(executed), parameters=parameters, cwd=str(ROOT),
                                   progress_bar=progress, kernel_name="python3", coalesce_streams=True,
                                   kernel_manager_class=quiet_kernel_manager())


def quiet_kernel_manager() -> type:
    """The notebooks' kernel manager (jupyter_client's, two changes): on POSIX the kernel talks over IPC sockets in
    a private temporary folder instead of TCP on localhost, unencrypted, which the kernel warned about at every
    start ("Kernel is running over TCP without encryption"); and a kernel being shut down after its last cell is
    not sent SIGINT first (jupyter_client does; the idle kernel logged "KeyboardInterrupt caught in kernel"). A
    kernel shut down mid-cell still gets the shutdown request, then SIGTERM and SIGKILL. Its group is the job's."""
    import atexit
    import shutil
    import tempfile

    from jupyter_client.manager import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            if os.name == "posix":  # a folder per kernel: a client left over from an earlier kernel of this
                # process never reconnects (as ZMQ clients do) to a later kernel's sockets of the same name
                folder = tempfile.mkdtemp(prefix="fspo-lite-kernel-")
                atexit.register(shutil.rmtree, folder, True)
                self.transport = "ipc"
                self.ip = os.path.join(folder, "kernel")

        async def _async_launch_kernel(self, kernel_cmd, **kw) -> None:  # its session: kernel and workers
            await super()._async_launch_kernel(kernel_cmd, **kw)
            register_group(getattr(self.provisioner, "pgid", None))

        async def _async_interrupt_kernel(self) -> None:
            if getattr(self, "shutting_down", False):
                return
            await super()._async_interrupt_kernel()

    return QuietKernelManager
