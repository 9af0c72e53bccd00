"""The notebooks' kernel client waits for a message in slices (fspo_lite.drivers.notebook_kernel.waits_in_slices): a
wait without a timeout asks the channel again after each slice until a message comes; a wait with a timeout stops
at it with queue.Empty, as jupyter_client's channel does. The channel here is a stand-in that answers from a script;
the hang this guards against (nbclient issue 312) is exercised by running notebook 05 (tests/test_notebooks_run.py)."""
import asyncio
from queue import Empty

import pytest

import fspo_lite.drivers.notebook_kernel as notebook_kernel


class Scripted:
    """A channel whose get_msg returns or raises the next scripted item, recording each timeout it was asked with."""

    def __init__(self, script):
        self.script, self.asked = list(script), []

    async def get_msg(self, timeout=None):
        self.asked.append(timeout)
        item = self.script.pop(0)
        if item is Empty:
            await asyncio.sleep(timeout or 0)
            raise Empty
        return item


def test_a_wait_without_timeout_asks_again_after_each_slice_until_a_message(monkeypatch):
    monkeypatch.setattr(notebook_kernel, "POLL_SLICE", 0.01)
    channel = notebook_kernel.waits_in_slices(Scripted)([Empty, Empty, Empty, {"msg_type": "execute_reply"}])
    assert asyncio.run(channel.get_msg()) == {"msg_type": "execute_reply"}
    assert channel.asked == [0.01] * 4  # never an unbounded wait


def test_a_wait_with_a_timeout_ends_with_empty_at_the_deadline(monkeypatch):
    monkeypatch.setattr(notebook_kernel, "POLL_SLICE", 0.02)
    channel = notebook_kernel.waits_in_slices(Scripted)([Empty] * 10)
    with pytest.raises(Empty):
        asyncio.run(channel.get_msg(timeout=0.05))
    assert 3 <= len(channel.asked) <= 4 and max(channel.asked) <= 0.02  # 0.02, 0.02, then what is left
    assert sum(channel.asked) == pytest.approx(0.05, abs=0.02)


def test_a_message_within_the_timeout_is_returned(monkeypatch):
    monkeypatch.setattr(notebook_kernel, "POLL_SLICE", 0.01)
    channel = notebook_kernel.waits_in_slices(Scripted)([Empty, {"msg_type": "status"}])
    assert asyncio.run(channel.get_msg(timeout=5)) == {"msg_type": "status"}


def test_the_notebooks_kernel_client_uses_the_sliced_channels():
    manager = notebook_kernel.quiet_kernel_manager()()
    client = manager.client()
    assert client.shell_channel_class.__name__ == client.iopub_channel_class.__name__ == "SlicedChannel"
