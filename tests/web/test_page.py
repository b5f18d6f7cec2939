"""End-to-end tests of the web page (app/web) in headless Chromium; run by app/web/test.

Each test opens the page with its settings in the address, as a teacher's link would, and
reads the run from the console, where the page writes every event as the JSON line
`trainer-cli --json` prints.
"""

import argparse
import base64
import functools
import http.server
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "app", "web"))
from devtools import Browser, BrowserError, console_lines, console_lines_for  # noqa: E402
from isolated_http import IsolatedHandler  # noqa: E402

ENDED = "headroom: run ended"
FAILED = "headroom error:"


class QuietHandler(IsolatedHandler):
    def log_message(self, *args):
        pass


def serve(folder: str) -> str:
    handler = functools.partial(QuietHandler, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def run_page(url: str, webgpu: bool, timeout: float, screenshot: str | None = None,
             screenshot_at_step: int = 0, folder: str | None = None, how: str = "picked",
             expect_error: bool = False) -> tuple[list[dict], Browser]:
    """The events of one run of the page; the browser stays open for DOM checks. With
    `folder`, the user picks it (`how="picked"`) or drops it on the page ("dropped") and
    presses Start (the address must not start the run)."""
    browser = Browser(webgpu=webgpu)
    browser.navigate(url)
    if folder:
        wait_window(browser)
        if how == "picked":
            browser.pick_folder("#folder", folder)
        else:
            browser.drop_folder(folder)
        # The page takes the files after an event of its own: Start once it shows them.
        wait_shown(browser, how, 30)
        click(browser, "Start")
    events = []
    for line in console_lines(browser, lambda l: l == ENDED or l.startswith(FAILED), timeout):
        if line.startswith(FAILED):
            if expect_error:
                return events, browser
            browser.close()
            raise AssertionError(f"the page reported an error: {line}")
        if line.startswith("{"):
            event = json.loads(line)
            events.append(event)
            if screenshot and event["event"] == "step" and event["step"] == screenshot_at_step:
                time.sleep(0.5)  # the page draws the step after logging it
                browser.screenshot(screenshot)
    return events, browser


def wait_window(browser: Browser, timeout: float = 60) -> None:
    """Waits for the page's window (egui on its canvas) to be open."""
    deadline = time.monotonic() + timeout
    while not browser.evaluate("typeof window.headroom === 'object'"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the page's window did not open in {timeout} s")
        time.sleep(0.1)


def shown(browser: Browser) -> list[dict]:
    """Every text the page's window painted in its last frame: {text, x, y, w, h} in CSS
    pixels of the page."""
    return browser.evaluate("window.headroom.shown()") or []


def shown_text(browser: Browser) -> str:
    return "\n".join(t["text"] for t in shown(browser))


def wait_shown(browser: Browser, text: str, timeout: float) -> str:
    """Waits for the window to show `text` (a frame follows each change within a moment)."""
    deadline = time.monotonic() + timeout
    while text not in (everything := shown_text(browser)):
        if time.monotonic() > deadline:
            raise AssertionError(f"the page does not show {text!r}; it shows:\n{everything}")
        time.sleep(0.1)
    return everything


def click(browser: Browser, label: str) -> None:
    """Clicks the window's button `label` where it is painted, as a user does."""
    found = [t for t in shown(browser) if t["text"] == label]
    if not found:
        raise AssertionError(f"the page shows no {label!r} button: {shown_text(browser)}")
    t = found[0]
    browser.click_at(t["x"] + t["w"] / 2, t["y"] + t["h"] / 2)


def of(events: list[dict], kind: str) -> list[dict]:
    """The events of one kind (`trainer-cli --json`'s `event` key: `step`, `plan`...)."""
    return [e for e in events if e.get("event") == kind]


def synthesize(trainer_cli: str, out: str, flags: list[str]) -> None:
    """Writes the built-in dataset's recordings as WAV files in the DCASE layout."""
    result = subprocess.run([trainer_cli, "synth", "--out", out, *flags],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"trainer-cli synth failed: {result.stderr}")


def native_steps(trainer_cli: str, args: list[str]) -> list[dict]:
    """The step events of `trainer-cli train --json ARGS`."""
    result = subprocess.run([trainer_cli, "train", "--json", *args],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"trainer-cli train {' '.join(args)} failed: {result.stderr}")
    lines = [json.loads(l) for l in result.stdout.splitlines() if l.startswith("{")]
    return of(lines, "step")


def native_losses(trainer_cli: str, flags: list[str]) -> list[float]:
    with tempfile.TemporaryDirectory() as out:
        return [s["loss"] for s in native_steps(trainer_cli, ["--out", out, *flags])]


def test_cpu_fallback_trains_plans_and_scores(base: str, screenshot: str | None, threaded: bool):
    """WebGPU off: auto falls back to the CPU, plans within the budget, trains with the loss
    going down, shows the memory, and scores the test split. `threaded`: the page has its
    module with threads (pkg-threads/), which the run must then take."""
    steps = 40
    events, browser = run_page(
        f"{base}?start=1&steps={steps}&seed=7&budget=1GiB", webgpu=False, timeout=900,
        screenshot=screenshot, screenshot_at_step=steps // 2,
    )
    try:
        choice = of(events, "backend_choice")[0]
        assert choice["backend"] == "flex", choice
        assert "no WebGPU" in choice["reason"], choice
        # With threads (app/web/build): rayon's pool as Web Workers, one per core the browser
        # reports (Chromium: the machine's); without them, one, in this isolated page.
        threads = browser.evaluate("navigator.hardwareConcurrency") if threaded else 1
        words = f"on {threads} CPU threads" if threads > 1 else "on one CPU thread"
        assert words in choice["reason"], choice
        plan = of(events, "plan")[0]
        assert plan["predicted_peak_bytes"] <= plan["budget_bytes"] == 1 << 30, plan
        assert of(events, "dry_run"), "the plan was not checked with a real step"
        config = of(events, "config")[0]
        assert config["memory_source"] == "host_allocator", config
        losses = [s["loss"] for s in of(events, "step")]
        assert len(losses) == steps, f"{len(losses)} steps of {steps}"
        assert all(math.isfinite(l) for l in losses), losses
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert last < 0.9 * first, f"the loss did not go down: {first:.4f} -> {last:.4f}"
        peaks = [s["mem_peak_bytes"] for s in of(events, "step")]
        assert 0 < max(peaks) <= 1 << 30, peaks
        memory = wait_shown(browser, "step peak", 10)
        assert "Memory (the page's heap, counted): in use" in memory and "MiB" in memory, memory
        evaluation = of(events, "evaluation")[0]
        assert evaluation["clips"] == config["test_clips"] > 0, evaluation
        aucs = [m["auc"] for m in evaluation["per_machine"]]
        assert all(0.0 <= a <= 1.0 for a in aucs) and len(set(aucs)) > 1, aucs
        table = wait_shown(browser, f"Anomaly scores of {evaluation['clips']} test clips", 10)
        assert "pAUC" in table and f"{evaluation['auc']:.3f}" in table, table
        # trainer-cli's results.csv, offered as a download.
        assert "results.csv" in table, table
        csv = page_file(browser, "results.csv").decode()
        assert csv.startswith("machine_type,id,auc,pauc,"), csv
        means = csv.splitlines()[-1].split(",")
        assert means[:2] == ["all", "mean"] and math.isclose(float(means[2]), evaluation["auc"],
                                                             rel_tol=1e-6), csv
    finally:
        browser.close()
    print(f"cpu fallback: {steps} steps, loss {first:.4f} -> {last:.4f}, "
          f"peak {max(peaks) >> 20} MiB, AUC {evaluation['auc']:.3f}")


def events_in(lines: list[str]) -> list[dict]:
    """The page's events among console lines."""
    return [json.loads(l) for l in lines if l.startswith("{")]


def steps_in(lines: list[str]) -> list[dict]:
    return of(events_in(lines), "step")


def test_cpu_pause_resume_and_stop(base: str):
    """Pause holds the run at a step boundary (the CPU run's one thread is handed back to
    the page there), Resume goes on, Stop ends the run early: it does not score the test
    split, and its losses are offered as losses.csv."""
    steps = 5000
    browser = Browser(webgpu=False)
    try:
        browser.navigate(f"{base}?start=1&backend=cpu&plan=0&steps={steps}&batch=2&patches=4"
                         "&accumulation=1&ids=1&seed=5")
        seen = []
        for line in console_lines(browser, lambda l: len(steps_in(seen)) >= 3, 300):
            seen.append(line)
        click(browser, "Pause")
        # The step under way, and lines already on their way, arrive within this.
        seen += console_lines_for(browser, 3)
        paused_at = steps_in(seen)[-1]["step"]
        held = steps_in(console_lines_for(browser, 4))
        assert not held, f"paused at step {paused_at}, the run went on: {held}"
        wait_shown(browser, f"paused after step {paused_at}/{steps}", 5)
        click(browser, "Resume")
        for line in console_lines(browser, lambda l: steps_in(seen)[-1]["step"] >= paused_at + 3,
                                  120):
            seen.append(line)
        click(browser, "Stop")
        for line in console_lines(browser, lambda l: l == ENDED or l.startswith(FAILED), 300):
            assert not line.startswith(FAILED), line
            seen.append(line)
        events = events_in(seen)
        finished = of(events, "finished")[0]
        assert finished["stopped_early"] and paused_at + 3 <= finished["step"] < steps, finished
        assert not of(events, "evaluation"), "a stopped run scored the test split"
        done = of(events, "step")
        assert [s["step"] for s in done] == list(range(1, finished["step"] + 1)), done
        wait_shown(browser, f"stopped at step {finished['step']}/{steps}", 10)
        csv = page_file(browser, "losses.csv").decode()
        header, *rows = csv.splitlines()
        assert header.startswith("step,loss,"), header
        in_csv = [(int(r.split(",")[0]), float(r.split(",")[1])) for r in rows]
        assert in_csv == [(s["step"], s["loss"]) for s in done], \
            [(a, b) for a, b in zip(in_csv, [(s["step"], s["loss"]) for s in done]) if a != b][:3]
    finally:
        browser.close()
    print(f"cpu pause/resume/stop: paused at step {paused_at}, stopped at {finished['step']}, "
          f"losses.csv {len(rows)} rows")


def test_webgpu_trains_and_scores(base: str):
    """WebGPU on: auto trains on the browser's GPU (SwiftShader here), the loss goes down,
    the GPU pool's memory is shown, and the test split is scored. A software GPU takes
    minutes to calibrate the planner, so this run gives its split (the CPU test plans)."""
    steps = 6
    events, browser = run_page(
        f"{base}?start=1&steps={steps}&seed=7&model=dcase-ae&plan=0&batch=2&patches=16"
        "&accumulation=1&ids=1&test_clips=4&budget=256MiB",
        webgpu=True, timeout=900,
    )
    try:
        choice = of(events, "backend_choice")[0]
        assert choice["backend"] == "wgpu", choice
        assert "the browser has WebGPU" in choice["reason"], choice
        config = of(events, "config")[0]
        assert config["memory_source"] == "device_pool", config
        losses = [s["loss"] for s in of(events, "step")]
        assert len(losses) == steps and all(math.isfinite(l) for l in losses), losses
        first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
        assert last < first, f"the loss did not go down: {losses}"
        reserved = [s["mem_reserved_bytes"] for s in of(events, "step")]
        assert all(r and 0 < r <= 256 << 20 for r in reserved), reserved
        memory = wait_shown(browser, "step peak", 10)
        assert "Memory (the WebGPU device pool): in use" in memory and ", pool " in memory, memory
        evaluation = of(events, "evaluation")[0]
        assert evaluation["clips"] == config["test_clips"] == 8, evaluation
        assert all(0.0 <= m["auc"] <= 1.0 for m in evaluation["per_machine"]), evaluation
        # No checkpoint on WebGPU yet (docs/WEB.md): the page says why, and offers none.
        note = wait_shown(browser, "No checkpoint to download", 10)
        assert "backend=cpu" in note, note
        assert browser.evaluate("window.headroom.file('model.safetensors')") is None
    finally:
        browser.close()
    print(f"webgpu: {steps} steps, loss {first:.4f} -> {last:.4f}, "
          f"pool {max(reserved) >> 20} MiB, AUC {evaluation['auc']:.3f}")


def losses_side_by_side(base: str, trainer_cli: str, page_backend: str, native_backend: str,
                        split: tuple[int, int, int], ids: int | None = None):
    """The first three steps' losses of the page and of trainer-cli, for the same seed, model
    and split (no planner)."""
    (batch, patches, accumulation), steps, seed = split, 3, 11
    query = (f"start=1&backend={page_backend}&plan=0&eval=0&steps={steps}&seed={seed}"
             f"&batch={batch}&patches={patches}&accumulation={accumulation}")
    flags = ["--backend", native_backend, "--no-plan", "--no-eval", "--steps", str(steps),
             "--seed", str(seed), "--batch-size", str(batch), "--n-patches", str(patches),
             "--gradient-accumulation-steps", str(accumulation)]
    if ids is not None:
        query += f"&ids={ids}"
        flags += ["--machine-ids", str(ids)]
    events, browser = run_page(f"{base}?{query}", webgpu=page_backend == "webgpu", timeout=900)
    browser.close()
    page = [s["loss"] for s in of(events, "step")]
    native = native_losses(trainer_cli, flags)
    assert len(page) == len(native) == steps, (page, native)
    return page, native


def test_webgpu_losses_equal_native(base: str, trainer_cli: str):
    """The page's first steps of the default model on WebGPU (SwiftShader) are native
    wgpu's (lavapipe here), for the same seed and split: the same WGSL kernels, Headroom's
    nearest-code kernel among them, on two software GPUs."""
    page, native = losses_side_by_side(base, trainer_cli, "webgpu", "wgpu", (1, 4, 1), ids=1)
    # The first step's loss is the same parameters through the same kernels: two software
    # GPUs round differently (measured 4e-5 apart). From the second on, AdamW's first updates
    # are about +-lr for every parameter whatever its gradient's size, so a gradient near 0
    # that the two round to opposite signs moves its parameter 2 lr apart (measured 1.2e-3).
    assert math.isclose(page[0], native[0], rel_tol=2e-4), f"page {page}, native {native}"
    for p, n in zip(page[1:], native[1:]):
        assert math.isclose(p, n, rel_tol=5e-3), f"page {page} against native {native}"
    print(f"webgpu losses equal native: page {page}, native {native}")


def test_cpu_losses_equal_native(base: str, trainer_cli: str):
    """The page's first steps on the CPU are the native run's, for the same seed, model and
    split (flex in WebAssembly against flex natively)."""
    page, native = losses_side_by_side(base, trainer_cli, "cpu", "flex", (8, 4, 1))
    for p, n in zip(page, native):
        assert math.isclose(p, n, rel_tol=1e-4), f"page {page} against native {native}"
    print(f"cpu losses equal native: page {page}, native {native}")


def test_recogniser_equals_native_and_reports_cer(base: str, trainer_cli: str):
    """The speech recogniser in the page on the CPU: planned by length, its first steps'
    losses are native flex's for the same seed (its host kernels in WebAssembly against the
    native ones; the two plans may pack a step's utterances differently, and the loss, a
    mean over the step's utterances, does not depend on it), and the run ends with CER and
    WER for validation and test."""
    steps, seed = 3, 7
    events, browser = run_page(
        f"{base}?start=1&backend=cpu&model=asr-transformer&steps={steps}&seed={seed}",
        webgpu=False, timeout=900,
    )
    browser.close()
    plan = of(events, "plan")[-1]
    assert plan.get("lengths"), f"planned by length: {plan}"
    page = of(events, "step")
    assert all(s.get("padding") for s in page), page
    with tempfile.TemporaryDirectory() as out:
        native = native_steps(trainer_cli, [
            "--out", out, "--model", "asr-transformer", "--backend", "flex",
            "--steps", str(steps), "--seed", str(seed), "--no-eval"])
    assert len(page) == len(native) == steps, (page, native)
    for p, n in zip(page, native):
        assert math.isclose(p["loss"], n["loss"], rel_tol=1e-4), f"page {p} against native {n}"
    results = of(events, "results")[-1]
    assert results["measures"] == ["CER", "WER", "attention CER", "attention WER"], results
    rows = {r["label"]: r for r in results["rows"]}
    assert set(rows) == {"validation", "test"}, results
    for row in rows.values():
        assert row["examples"] > 0 and all(math.isfinite(v) and v >= 0 for v in row["values"]), row
    print(f"recogniser: page losses {[p['loss'] for p in page]}, native "
          f"{[n['loss'] for n in native]}; CER/WER {[rows[k]['values'] for k in rows]}")


def test_gan_equals_native_and_shows_its_grid(base: str, trainer_cli: str):
    """The GAN in the page on the CPU: each phase's loss at the first step is native flex's
    for the same seed and split (the same parameters, sums in another order), and at the
    next within 1e-3 (after one Adam step, whose first update is about the learning rate
    whatever a gradient's size, the order's differences move the parameters themselves;
    the generator's loss is a mean of scores that nearly cancel); the run ends with the
    picture of generated patches (a row per machine), drawn from the event and shown in the
    window."""
    steps, seed = 2, 7
    split = "plan=0&batch=4&patches=2&accumulation=1"
    events, browser = run_page(
        f"{base}?start=1&backend=cpu&model=spec-gan&steps={steps}&seed={seed}&eval=0&{split}",
        webgpu=False, timeout=600,
    )
    try:
        pictures = of(events, "picture")
        assert pictures, f"no picture: {[e['event'] for e in events]}"
        last = pictures[-1]
        picture = last["picture"]
        assert picture["width"] * picture["height"] == len(picture["pixels"]) > 0, last["about"]
        assert len(set(picture["pixels"])) > 2, "a picture of one or two grey levels"
        wait_shown(browser, f"Step {last['step']}: a row per machine", 30)
    finally:
        browser.close()
    page = of(events, "step")
    with tempfile.TemporaryDirectory() as out:
        native = native_steps(trainer_cli, [
            "--out", out, "--model", "spec-gan", "--backend", "flex", "--steps", str(steps),
            "--seed", str(seed), "--no-eval", "--no-plan", "--batch-size", "4",
            "--n-patches", "2", "--gradient-accumulation-steps", "1"])
    assert len(page) == len(native) == steps, (page, native)
    for p, n in zip(page, native):
        got = [(ph["phase"], ph["loss"]) for ph in p["phases"]]
        expected = [(ph["phase"], ph["loss"]) for ph in n["phases"]]
        assert [g[0] for g in got] == [e[0] for e in expected] == ["discriminator", "generator"]
        for (phase, a), (_, b) in zip(got, expected):
            close = (math.isclose(a, b, rel_tol=1e-4) if p["step"] == 1
                     else math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3))
            assert close, f"step {p['step']} {phase}: page {a}, native {b}"
    print(f"gan: page phases {[[ph['loss'] for ph in p['phases']] for p in page]}, native "
          f"{[[ph['loss'] for ph in n['phases']] for n in native]}")


def test_contrastive_equals_native_and_reports_recall(base: str, trainer_cli: str):
    """The contrastive model in the page on the CPU, a step of 8 pairs in two micro-batches
    of 4, gradient-cached (every pair of the step a negative of every other): the first
    step's loss is native flex's for the same seed and split, the next within 1e-3 (one
    AdamW step moves the parameters by about the learning rate whatever the sums' order),
    and the run ends with recall at 1, 5 and 10 both ways on the test split."""
    steps, seed = 2, 7
    split = "plan=0&batch=4&patches=1&accumulation=2"
    events, browser = run_page(
        f"{base}?start=1&backend=cpu&model=speech-clap&steps={steps}&seed={seed}&{split}",
        webgpu=False, timeout=900,
    )
    browser.close()
    page = of(events, "step")
    with tempfile.TemporaryDirectory() as out:
        native = native_steps(trainer_cli, [
            "--out", out, "--model", "speech-clap", "--backend", "flex", "--steps", str(steps),
            "--seed", str(seed), "--no-eval", "--no-plan", "--batch-size", "4",
            "--gradient-accumulation-steps", "2"])
    assert len(page) == len(native) == steps, (page, native)
    for p, n in zip(page, native):
        close = (math.isclose(p["loss"], n["loss"], rel_tol=1e-4) if p["step"] == 1
                 else math.isclose(p["loss"], n["loss"], rel_tol=1e-3))
        assert close, f"step {p['step']}: page {p['loss']}, native {n['loss']}"
    results = of(events, "results")[-1]
    assert any("R@1" in m for m in results["measures"]), results["measures"]
    rows = {r["label"]: r for r in results["rows"]}
    assert "test" in rows, results
    for value in rows["test"]["values"]:
        assert 0.0 <= value <= 1.0, rows["test"]
    print(f"contrastive: page losses {[p['loss'] for p in page]}, native "
          f"{[n['loss'] for n in native]}; test {dict(zip(results['measures'], rows['test']['values']))}")


def test_user_folder_trains_as_native(base: str, trainer_cli: str):
    """A folder of WAV recordings in the DCASE layout, picked in the page: its features are
    computed in WebAssembly by the native code, so the first steps' losses are those of
    `trainer-cli train --data-root` on the same folder; the test split is scored. A folder
    without the layout, dropped on the page, is an error in the page that says what is
    expected."""
    split, steps, seed = (4, 4, 1), 3, 11
    (batch, patches, accumulation) = split
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "dev_data")
        synthesize(trainer_cli, data, ["--machine-type", "fan", "--machine-ids", "2",
                                       "--train-clips-per-id", "6", "--test-clips-per-id", "2",
                                       "--seed", "5"])
        query = (f"backend=cpu&plan=0&steps={steps}&seed={seed}&batch={batch}"
                 f"&patches={patches}&accumulation={accumulation}")
        events, browser = run_page(f"{base}?{query}", webgpu=False, timeout=900, folder=data)
        try:
            wait_shown(browser, "Data: 20 .wav/.npy files picked (dev_data).", 5)
        finally:
            browser.close()
        native = native_losses(trainer_cli, [
            "--data-root", data, "--backend", "flex", "--no-plan", "--steps", str(steps),
            "--seed", str(seed), "--batch-size", str(batch), "--n-patches", str(patches),
            "--gradient-accumulation-steps", str(accumulation)])
        config = of(events, "config")[0]
        dataset = of(events, "dataset")[0]
        assert dataset["source"] == "dev_data" and dataset["machine_types"] == ["fan"], dataset
        page = [s["loss"] for s in of(events, "step")]
        assert len(page) == len(native) == steps, (page, native)
        for p, n in zip(page, native):
            assert math.isclose(p, n, rel_tol=1e-4), f"page {page} against native {native}"
        evaluation = of(events, "evaluation")[0]
        assert evaluation["clips"] == config["test_clips"] == 8, evaluation
        assert sorted(m["machine_id"] for m in evaluation["per_machine"]) == [0, 1], evaluation

        loose = os.path.join(tmp, "recordings")
        os.makedirs(loose)
        shutil.copy(os.path.join(data, "fan", "test", os.listdir(os.path.join(data, "fan", "test"))[0]),
                    loose)
        _, browser = run_page(f"{base}?{query}", webgpu=False, timeout=120, folder=loose,
                              how="dropped", expect_error=True)
        try:
            window = wait_shown(browser, "Error: ", 10)
        finally:
            browser.close()
        assert "Data: 1 .wav/.npy files dropped (recordings)." in window, window
        error = next(line for line in window.splitlines() if line.startswith("Error: "))
        assert "recordings holds no machine-type folder" in error, error
    print(f"picked folder: losses equal native: page {page}, native {native}; "
          f"AUC {evaluation['auc']:.3f}; a folder without the layout: {error}")


def page_file(browser: Browser, name: str) -> bytes:
    """A file the page offers as a download, as its bytes."""
    encoded = browser.evaluate(
        f"fetch(window.headroom.file('{name}')).then(r => r.arrayBuffer())"
        ".then(b => { let s = ''; for (const x of new Uint8Array(b)) s += String.fromCharCode(x);"
        " return btoa(s); })")
    if encoded is None:
        raise AssertionError(f"the page offers no {name}")
    return base64.b64decode(encoded)


def resume_natively(trainer_cli: str, checkpoint: str, steps: int) -> list[tuple[int, float]]:
    """The (step, loss) of `trainer-cli train --resume checkpoint --steps steps`."""
    steps = native_steps(trainer_cli, ["--resume", checkpoint, "--steps", str(steps), "--no-eval"])
    return [(s["step"], s["loss"]) for s in steps]


def assert_same_steps(got: list[tuple[int, float]], expected: list[tuple[int, float]], what: str):
    assert [s for s, _ in got] == [s for s, _ in expected], (what, got, expected)
    for (_, a), (_, b) in zip(got, expected):
        assert math.isclose(a, b, rel_tol=1e-4), f"{what}: {got} against {expected}"


CHECKPOINT_FILES = ("model.safetensors", "optimizer.burnpack", "state.json")


def test_checkpoint_resumes_in_trainer_cli_and_in_the_page(base: str, trainer_cli: str):
    """A run of 3 steps on the CPU, in the page and natively: the checkpoint the page offers,
    resumed by `trainer-cli train --resume` to 5 steps, trains steps 4 and 5 as trainer-cli's
    own checkpoint does (weights, AdamW's moments and the data's position all carried); and
    the same files, chosen in a fresh page with "Resume from a checkpoint...", train steps 4
    and 5 there too."""
    split, seed = (4, 4, 1), 11
    (batch, patches, accumulation) = split
    flags = ["--backend", "flex", "--no-plan", "--no-eval", "--seed", str(seed),
             "--batch-size", str(batch), "--n-patches", str(patches),
             "--gradient-accumulation-steps", str(accumulation), "--steps", "3"]
    settings = (f"backend=cpu&plan=0&eval=0&seed={seed}&batch={batch}&patches={patches}"
                f"&accumulation={accumulation}")
    with tempfile.TemporaryDirectory() as tmp:
        native_run = os.path.join(tmp, "native")
        native_steps(trainer_cli, ["--out", native_run, *flags])
        native = resume_natively(trainer_cli, native_run, 5)

        events, browser = run_page(f"{base}?start=1&steps=3&{settings}", webgpu=False,
                                   timeout=900)
        try:
            from_page = os.path.join(tmp, "from-page")
            os.makedirs(from_page)
            for name in CHECKPOINT_FILES:
                with open(os.path.join(from_page, name), "wb") as f:
                    f.write(page_file(browser, name))
        finally:
            browser.close()
        assert len(of(events, "step")) == 3, events
        page_checkpoint = resume_natively(trainer_cli, from_page, 5)
        assert_same_steps(page_checkpoint, native, "the page's checkpoint, resumed natively")

        browser = Browser(webgpu=False)
        try:
            browser.navigate(f"{base}?steps=5&{settings}")
            wait_window(browser)
            browser.pick_files("#checkpoint", [os.path.join(from_page, n)
                                               for n in CHECKPOINT_FILES])
            wait_shown(browser, "Resume from: model.safetensors, optimizer.burnpack, "
                       "state.json (step 3).", 30)
            click(browser, "Start")
            resumed = []
            for line in console_lines(browser, lambda l: l == ENDED or l.startswith(FAILED),
                                      600):
                assert not line.startswith(FAILED), line
                resumed.append(line)
            in_page = [(s["step"], s["loss"]) for s in steps_in(resumed)]
            assert_same_steps(in_page, native, "the page's checkpoint, resumed in the page")
            config = of(events_in(resumed), "config")[0]
            assert config["start_step"] == 3 and config["total_steps"] == 5, config
        finally:
            browser.close()
    print(f"checkpoint: trainer-cli resumed its own step-3 checkpoint to {native}, "
          f"the page's to {page_checkpoint}, the page resumed it to {in_page}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist", required=True, help="the built page (app/web/build)")
    parser.add_argument("--trainer-cli", required=True, help="a built trainer-cli binary")
    parser.add_argument("--screenshot", help="where to save the page mid-training (PNG)")
    parser.add_argument("--only", help="run the tests whose name contains this")
    args = parser.parse_args()
    base = serve(args.dist)
    tests = {
        "webgpu_trains_and_scores": lambda: test_webgpu_trains_and_scores(base),
        "webgpu_losses_equal_native":
            lambda: test_webgpu_losses_equal_native(base, args.trainer_cli),
        "cpu_fallback_trains_plans_and_scores":
            lambda: test_cpu_fallback_trains_plans_and_scores(
                base, args.screenshot, os.path.isdir(os.path.join(args.dist, "pkg-threads"))),
        "cpu_losses_equal_native": lambda: test_cpu_losses_equal_native(base, args.trainer_cli),
        "cpu_pause_resume_and_stop": lambda: test_cpu_pause_resume_and_stop(base),
        "recogniser_equals_native_and_reports_cer":
            lambda: test_recogniser_equals_native_and_reports_cer(base, args.trainer_cli),
        "gan_equals_native_and_shows_its_grid":
            lambda: test_gan_equals_native_and_shows_its_grid(base, args.trainer_cli),
        "contrastive_equals_native_and_reports_recall":
            lambda: test_contrastive_equals_native_and_reports_recall(base, args.trainer_cli),
        "user_folder_trains_as_native":
            lambda: test_user_folder_trains_as_native(base, args.trainer_cli),
        "checkpoint_resumes_in_trainer_cli_and_in_the_page":
            lambda: test_checkpoint_resumes_in_trainer_cli_and_in_the_page(base, args.trainer_cli),
    }
    chosen = [name for name in tests if args.only is None or args.only in name]
    failed = 0
    for name in chosen:
        started = time.monotonic()
        print(f"{name} ...", flush=True)
        try:
            tests[name]()
            print(f"  ok ({time.monotonic() - started:.0f} s)", flush=True)
        except (AssertionError, BrowserError) as e:
            failed += 1
            print(f"  FAILED ({time.monotonic() - started:.0f} s): {e}", flush=True)
    print(f"{len(chosen) - failed} passed, {failed} failed")
    sys.exit(1 if failed or not chosen else 0)


if __name__ == "__main__":
    main()
