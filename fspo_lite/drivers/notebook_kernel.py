"""How the lite job runs one notebook: papermill with the project's kernel manager (`execute_notebook`).

The kernel talks over IPC sockets in a private folder, is not interrupted after its last cell, and runs in its own
process group, which the job's signal handling ends (fspo_lite.drivers.job_control); its progress bars are saved as
text (fspo_lite.progress). Its client waits for messages in slices (`POLL_SLICE`), which papermill's client needs
where a cell shows an ipywidgets Output (notebook 05), see `waits_in_slices`.
"""

from __future__ import annotations

import os
from pathlib import Path

from fspo_lite.drivers.job_control import register_group
from fspo_lite.progress import headless_progress

ROOT = Path(__file__).resolve().parents[2]
POLL_SLICE = 1.0
"""Seconds the client waits on a channel before it looks again whether a message is there."""


def execute_notebook(source: Path, executed: Path, parameters: dict, progress: bool = False) -> None:
    """Run the notebook under papermill into `executed`, its bars as text saved as done (fspo_lite.progress)."""
    import papermill
    with headless_progress():
        papermill.execute_notebook(str(source), str(executed), parameters=parameters, cwd=str(ROOT),
                                   progress_bar=progress, kernel_name="python3", coalesce_streams=True,
                                   kernel_manager_class=quiet_kernel_manager())


def waits_in_slices(channel_class: type) -> type:
    """`channel_class` (jupyter_client's async channel) whose get_msg without a timeout waits POLL_SLICE seconds at a
    time and then asks the socket again, and with one stops at it as before. nbclient sends an Output widget's state
    on the shell channel while it waits there for the cell's reply (nbclient issue 312, open): now and then the
    reply was in the socket but the wait never woke (the kernel idle, its last cell run), and notebook 05 hung until
    the test's timeout. Asking again each second finds a message the wake-up missed."""
    from queue import Empty
    from time import monotonic

    class SlicedChannel(channel_class):
        async def get_msg(self, timeout: float | None = None) -> dict:
            deadline = None if timeout is None else monotonic() + timeout
            while True:
                left = POLL_SLICE if deadline is None else min(POLL_SLICE, max(0.0, deadline - monotonic()))
                try:
                    return await super().get_msg(timeout=left)
                except Empty:
                    if deadline is not None and monotonic() >= deadline:
                        raise

    return SlicedChannel


def quiet_kernel_manager() -> type:
    """The notebooks' kernel manager (jupyter_client's, three changes; the third: its client waits in slices,
    `waits_in_slices`): on POSIX the kernel talks over IPC sockets in
    a private temporary folder instead of TCP on localhost, unencrypted, which the kernel warned about at every
    start ("Kernel is running over TCP without encryption"); and a kernel being shut down after its last cell is
    not sent SIGINT first (jupyter_client does; the idle kernel logged "KeyboardInterrupt caught in kernel"). A
    kernel shut down mid-cell still gets the shutdown request, then SIGTERM and SIGKILL. Its group is the job's."""
    import atexit
    import shutil
    import tempfile

    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_client.channels import AsyncZMQSocketChannel
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Type

    sliced = waits_in_slices(AsyncZMQSocketChannel)

    class SlicedKernelClient(AsyncKernelClient):
        shell_channel_class = Type(sliced)
        iopub_channel_class = Type(sliced)

    class QuietKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.client_factory = SlicedKernelClient  # see waits_in_slices
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
