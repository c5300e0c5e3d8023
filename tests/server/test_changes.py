"""``GET /api/vgpu/slices?since=`` carries what changed after ``since``; laid over the poller's
previous reply (as JupyterLab's store does, labextension/src/store/model.ts ``mergeSlices``) it is
the whole reply: what a user sees is the same, for a fraction of the bytes."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_vgpu.server.changes import Changes

from .conftest import INTERVAL, GiB, get_json, until, usage


def merge(shown: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """What the sidebar holds after a ``?since=`` reply: each slice's changed fields over the ones
    it kept (a slice left out has ended), its new history points appended, the top-level fields
    left out (``watchdog``) kept."""
    kept = {s["id"]: s for s in shown["slices"]}
    slices = []
    for changed in changes["slices"]:
        before = kept.get(changed["id"])
        assert before is not None or "holder_kind" in changed, f"slice {changed['id']} is new but not whole"
        merged = {**(before or {}), **changed}
        merged["history"] = [*(before or {}).get("history", []), *changed["history"]]
        slices.append(merged)
    return {**shown, **changes, "slices": slices}


#: Read at each request, not from the sample: two replies a moment apart differ by that moment.
CLOCK = ("idle_seconds",)


def assert_shows_the_whole(shown: dict[str, Any], whole: dict[str, Any]) -> None:
    """Every field the same; each history ends with the whole reply's (which keeps fewer points)."""
    assert {k: v for k, v in shown.items() if k != "slices"} == {k: v for k, v in whole.items() if k != "slices"}
    assert [s["id"] for s in shown["slices"]] == [s["id"] for s in whole["slices"]]
    for mine, theirs in zip(shown["slices"], whole["slices"]):
        differ = {
            k: (mine.get(k), theirs.get(k))
            for k in mine.keys() | theirs.keys()
            if k != "history" and mine.get(k) != theirs.get(k)
            and not (k in CLOCK and None not in (mine.get(k), theirs.get(k)) and abs(mine[k] - theirs[k]) < 1)
        }
        assert differ == {}, f"slice {mine['id']} shows (merged, whole): {differ}"
        assert mine["history"][len(mine["history"]) - len(theirs["history"]) :] == theirs["history"]


# -- the server --------------------------------------------------------------------------------
async def test_the_changes_since_the_previous_reply_make_the_whole_reply_again(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel(path="train.ipynb")
    other = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB", utilization=10), usage(other.pid, "1GiB")])
    shown = await until(partial(slices_where, jp_fetch, None, lambda s: s["memory_used"] == GiB), what="both kernels' usage")
    session = next(s for s in await get_json(jp_fetch, "api", "sessions") if s["kernel"]["id"] == kernel.id)

    async def grows() -> None:
        simulation_file(processes=[usage(kernel.pid, "2GiB", utilization=60), usage(other.pid, "1GiB")])

    async def over() -> None:
        simulation_file(processes=[usage(kernel.pid, "5GiB", utilization=90), usage(other.pid, "1GiB")])

    async def rename() -> None:
        await jp_fetch("api", "sessions", session["id"], method="PATCH", body=json.dumps({"path": "renamed.ipynb"}))

    steps: list[tuple[str, Callable[[], Awaitable[None]], Callable[[dict[str, Any]], bool]]] = [
        ("its use grows", grows, lambda s: s["memory_used"] == 2 * GiB),
        ("it uses more than its 4 GiB: the watchdog warns", over, lambda s: s["state"] == "over" and bool(s["watchdog"]["events"])),
        ("its notebook is renamed", rename, lambda s: s["path"] == "renamed.ipynb"),
    ]
    sizes = []
    for what, change, done in steps:
        await change()
        await until(partial(slices_where, jp_fetch, kernel.id, done), what=what)
        changes, whole = await until(partial(one_sample, jp_fetch, shown["taken_at"]), what="two replies of one sample")
        shown = merge(shown, changes)
        assert_shows_the_whole(shown, whole)
        sizes.append((len(json.dumps(changes)), len(json.dumps(whole))))
    assert shown["watchdog"]["events"], "the watchdog's warning reached the merged view"
    (quiet,) = [s for s in (await changes_since(jp_fetch, 1e300))["slices"] if s["kernel_id"] == other.id]
    assert quiet == {"id": quiet["id"], "kernel_id": other.id, "history": []}  # nothing changed after then
    assert all(part < whole / 2 for part, whole in sizes), sizes


async def test_the_sample_sends_the_slices_changes_as_slices_does_and_the_host_use_each_time(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    """The one poll JupyterLab makes, ``GET /api/vgpu/sample?since=``: its ``slices`` are what
    ``GET /api/vgpu/slices?since=`` sends (the 64-slice poll stays small), and the followed
    kernel's ``host`` comes in every reply that asks for it, never as a change to other pollers."""
    kernel = await start_kernel(path="train.ipynb")
    other = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB"), usage(other.pid, "1GiB")])
    shown = await until(partial(slices_where, jp_fetch, None, lambda s: s["memory_used"] == GiB), what="both kernels' usage")

    async def sample_and_whole() -> tuple[Any, Any] | None:
        """A ``/sample?since=`` reply and a whole ``/slices`` one from the same newer sample."""
        since = repr(shown["taken_at"])
        sample = json.loads((await jp_fetch("api", "vgpu", "sample", params={"since": since, "host": kernel.id})).body)
        whole = await get_json(jp_fetch, "api", "vgpu", "slices")
        return (sample["slices"], whole) if sample["slices"]["taken_at"] == whole["taken_at"] > shown["taken_at"] else None

    changes, whole = await until(sample_and_whole, what="two replies of one sample")
    (mine,) = [s for s in changes["slices"] if s["kernel_id"] == kernel.id]
    assert mine["host"] is not None and mine["host"]["memory_rss"] > 0  # asked for: there, changed or not
    assert "holder_kind" not in mine and "gpus" not in mine  # unchanged after since: left out
    assert "watchdog" not in changes
    without_host = {**changes, "slices": [{k: v for k, v in s.items() if k != "host"} for s in changes["slices"]]}
    assert_shows_the_whole(merge(shown, without_host), whole)
    assert len(json.dumps(changes)) < len(json.dumps(whole)) / 2
    # Another poller's host use is no change to this one: /slices never sends it.
    plain = await changes_since(jp_fetch, shown["taken_at"])
    assert [s["id"] for s in plain["slices"]] == [s["id"] for s in changes["slices"]]
    assert all("host" not in s for s in plain["slices"])
    # A kernel that is not this server's (or has just ended) has no host use: no failure either.
    gone = json.loads((await jp_fetch("api", "vgpu", "sample", params={"host": "no-such-kernel"})).body)
    assert len(gone["slices"]["slices"]) == 2


async def slices_where(jp_fetch: Any, kernel_id: str | None, test: Callable[[dict[str, Any]], bool]) -> Any:
    """The whole reply once both slices are there and ``test`` holds for ``kernel_id``'s (for
    each, when None)."""
    reply = await get_json(jp_fetch, "api", "vgpu", "slices")
    mine = [s for s in reply["slices"] if kernel_id in (None, s["kernel_id"])]
    return reply if len(reply["slices"]) == 2 and all(test(s) for s in mine) else None


async def changes_since(jp_fetch: Any, since: float) -> Any:
    return json.loads((await jp_fetch("api", "vgpu", "slices", params={"since": repr(since)})).body)


async def one_sample(jp_fetch: Any, since: float) -> tuple[Any, Any] | None:
    """A ``?since=`` reply and a whole one made from the same sample (the monitor samples every
    0.2 s here, so two replies in a row mostly are); None when they are not."""
    changes = await changes_since(jp_fetch, since)
    whole = await get_json(jp_fetch, "api", "vgpu", "slices")
    return (changes, whole) if changes["taken_at"] == whole["taken_at"] > since else None


assert INTERVAL < 1  # one_sample relies on fast ticks


# -- the bookkeeping, step by step -------------------------------------------------------------
def reply(taken_at: float, slices: list[dict[str, Any]], events: list[int] | None = None) -> dict[str, Any]:
    """A slices reply as views.slices_view makes it (the fields that matter here)."""
    return {
        "node": "here",
        "taken_at": taken_at,
        "slices": copy.deepcopy(slices),
        "waiting": [],
        "watchdog": {"action": "warn", "events": events or []},
    }


def slice_(sid: str, **fields: Any) -> dict[str, Any]:
    return {"id": sid, "kernel_id": f"k-{sid}", "holder_kind": "kernel", "path": "a.ipynb", "memory_used": 1,
            "history": [], **fields}  # fmt: skip


def test_a_change_between_two_replies_of_one_sample_reaches_a_poller_of_that_sample() -> None:
    """A notebook renamed (the session manager's path) changes a reply without a new sample:
    the poller asks with that very sample's time, and still gets it."""
    changes = Changes()
    taken_at = time.time()
    first = changes.slices_reply(reply(taken_at, [slice_("a")]), 0.0)
    later = changes.slices_reply(reply(taken_at, [slice_("a", path="renamed.ipynb")]), taken_at)
    assert later["slices"] == [{"id": "a", "kernel_id": "k-a", "path": "renamed.ipynb", "history": []}]
    assert merge(first, later)["slices"][0]["path"] == "renamed.ipynb"


def test_a_value_that_changes_back_is_sent_again_and_a_since_after_it_all_gets_ids_only() -> None:
    changes = Changes()
    t0 = time.time()
    changes.slices_reply(reply(t0, [slice_("a")], [1]), 0.0)
    changes.slices_reply(reply(t0 + 1, [slice_("a", memory_used=5)], [1]), 0.0)
    back = changes.slices_reply(reply(t0 + 2, [slice_("a")], [1]), t0 + 1)
    assert back["slices"] == [{"id": "a", "kernel_id": "k-a", "memory_used": 1, "history": []}]
    assert "watchdog" not in back  # unchanged since t0 + 1
    nothing = changes.slices_reply(reply(t0 + 3, [slice_("a")], [1]), 1e300)
    assert nothing["slices"] == [{"id": "a", "kernel_id": "k-a", "history": []}]
    assert "watchdog" not in nothing and nothing["waiting"] == [] and nothing["taken_at"] == t0 + 3


def test_a_point_the_monitor_records_while_a_reply_is_made_waits_for_the_next_reply(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """A handler reads the monitor's sample, then awaits (the kernels, the kernelspecs) while the
    monitor records the next point: a reply with that newer point and the older ``taken_at``
    made the next ``?since=taken_at`` reply send the point again, twice in the sidebar's chart
    (a flake of the test above on a loaded machine)."""
    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.ledger import SQLiteLedger
    from jupyter_vgpu.server.monitor import UsageMonitor
    from jupyter_vgpu.server.views import devices_view, slices_view
    from jupyter_vgpu.server.watchdog import Watchdog
    from jupyter_vgpu.slices import Holder, SliceRequest

    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "1x16GiB")
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"))
    monitor = UsageMonitor(ledger, interval=1.0, history_seconds=60, history_points=60)
    watchdog = Watchdog(None, action="warn")
    try:
        held = ledger.reserve(SliceRequest.parse(0.25), Holder("command", "test"))
        first = monitor.collect()
        monitor._record(first)  # what the handler has read
        newer = dataclasses.replace(monitor.collect(), taken_at=first.taken_at + 1)  # the next tick's
        monitor._record(newer)  # recorded while it awaited
        (shown,) = slices_view(first, monitor, watchdog, {})["slices"]
        assert shown["id"] == held.id and [p["t"] for p in shown["history"]] == [first.taken_at]
        assert [p["t"] for p in devices_view(first, monitor, watchdog)["devices"][0]["history"]] == [first.taken_at]
        (next_reply,) = slices_view(newer, monitor, watchdog, {}, since=first.taken_at)["slices"]
        assert [p["t"] for p in next_reply["history"]] == [newer.taken_at]  # once, in the next reply
    finally:
        monitor.executor.shutdown()
        ledger.close()


def test_a_wall_clock_step_back_hides_no_change() -> None:
    changes = Changes()
    first = changes.slices_reply(reply(1_700_000_100.0, [slice_("a")]), 0.0)
    # NTP stepped the clock back 100 s: the next samples are stamped earlier than the first.
    later = changes.slices_reply(reply(1_700_000_000.0, [slice_("a", memory_used=7)]), first["taken_at"])
    assert later["slices"][0]["memory_used"] == 7
    last = changes.slices_reply(reply(1_700_000_001.0, [slice_("a", memory_used=8)]), later["taken_at"])
    assert last["slices"][0]["memory_used"] == 8


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_poller_that_merges_the_changes_shows_the_whole_reply(data: st.DataObject) -> None:
    """Samples come, values change (in a sample or between two replies of one), slices start
    and end, the watchdog acts, and three pollers ask at random moments, each with its previous
    reply's ``taken_at``; a reply may be made from a sample older than the newest (two requests
    at once: one got the older sample, then waited for the session manager)."""
    changes = Changes()
    clock = 1_700_000_000.0
    # What each sample saw, newest last: its time, slices and their histories, watchdog events.
    samples: list[tuple[float, dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]], list[int]]] = [
        (clock, {"a": slice_("a")}, {"a": []}, [])
    ]
    pollers: list[dict[str, Any] | None] = [None, None, None]

    def whole(sample: int, since: float) -> dict[str, Any]:
        taken_at, slices, history, events = samples[sample]
        views = [{**s, "history": [p for p in history[sid] if p["t"] > since]} for sid, s in slices.items()]
        return reply(taken_at, views, events)

    for _ in range(data.draw(st.integers(1, 40))):
        clock += data.draw(st.sampled_from([0.001, 0.5, 2.0]))
        action = data.draw(st.sampled_from(["sample", "change", "start", "end", "event", "poll", "poll", "poll"]))
        _, now, history, events = copy.deepcopy(samples[-1])
        if action == "poll":
            i = data.draw(st.integers(0, len(pollers) - 1))
            shown = pollers[i]
            since = 0.0 if shown is None else shown["taken_at"]
            newer = [k for k, sample in enumerate(samples) if sample[0] >= since]
            made_from = data.draw(st.sampled_from(newer[-3:]))  # mostly the newest
            answer = changes.slices_reply(whole(made_from, since), since)
            shown = answer if shown is None else merge(shown, answer)
            assert_shows_the_whole(shown, whole(made_from, 0.0))
            pollers[i] = shown
            continue
        if action == "sample":
            for sid, s in now.items():
                s["memory_used"] = data.draw(st.integers(0, 3))
                history[sid].append({"t": clock, "used": s["memory_used"]})
            samples.append((clock, now, history, events))
            continue
        # What changes between two replies of one sample (the sample keeps its time).
        if action == "change" and now:
            now[data.draw(st.sampled_from(sorted(now)))]["path"] = data.draw(st.sampled_from(["a.ipynb", "b.ipynb"]))
        elif action == "start":
            sid = f"s{sum(len(h) for _, _, h, _ in samples)}-{len(history)}"
            now[sid], history[sid] = slice_(sid), []
        elif action == "end" and now:
            del now[data.draw(st.sampled_from(sorted(now)))]
        elif action == "event":
            events.append(len(events))
        samples[-1] = (samples[-1][0], now, history, events)
