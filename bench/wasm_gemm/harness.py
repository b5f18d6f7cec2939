"""What bench/wasm_gemm's scripts share: building the crate natively and for the page, and
running page.html in headless Chromium (tests/web/devtools.py) over one or more builds of
its module."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "web"))
from devtools import Browser, console_lines  # noqa: E402
from test_page import serve  # noqa: E402, F401 (the scripts serve through here)

MODULE = "wasm_gemm_bench.wasm"


def build() -> tuple[str, str]:
    """The native binary and a folder holding the page and its module, to serve."""
    cargo = ["cargo", "build", "--quiet", "--release", "--manifest-path", os.path.join(HERE, "Cargo.toml")]
    subprocess.run(cargo, check=True)
    env = dict(os.environ, RUSTFLAGS="-C target-feature=+simd128")
    subprocess.run([*cargo, "--lib", "--target", "wasm32-unknown-unknown"], check=True, env=env)
    target = os.path.join(HERE, "target")
    folder = page_folder({MODULE: os.path.join(target, "wasm32-unknown-unknown", "release", MODULE)})
    return os.path.join(target, "release", "native"), folder


def page_folder(modules: dict[str, str]) -> str:
    """A new folder holding page.html and each module under its name."""
    folder = tempfile.mkdtemp(prefix="wasm-gemm-")
    shutil.copy(os.path.join(HERE, "page.html"), folder)
    for name, path in modules.items():
        shutil.copy(path, os.path.join(folder, name))
    return folder


def page_passes(base: str, modules: list[str], passes: int,
                extra_flags: tuple[str, ...] = ()) -> tuple[list[dict[str, list[float]]], list[int], float]:
    """One page over the served `modules`: each pass's seconds a product per module, each
    product's calls in a step, and the worst relative error of any module's products (a
    module whose products are wrong stops the run)."""
    browser = Browser(webgpu=False, extra_flags=extra_flags)
    results = []
    try:
        browser.navigate(f"{base}page.html?modules={','.join(modules)}&passes={passes}")
        for line in console_lines(browser, lambda l: l.startswith("wasm-gemm-done "), 1200):
            # The browser's own lines come among them (the favicon's 404).
            if line.startswith("wasm-gemm-pass "):
                results.append(json.loads(line[len("wasm-gemm-pass "):]))
            elif line.startswith("wasm-gemm-done "):
                done = json.loads(line[len("wasm-gemm-done "):])
                if not done["error"] < 1e-4:
                    raise SystemExit(f"WebAssembly's products are wrong: relative error {done['error']} "
                                     "against a plain loop")
                return results, done["calls"], done["error"]
    finally:
        browser.close()
    raise RuntimeError("the page did not finish")
