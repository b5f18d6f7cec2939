// The engine runs here, off the page's thread: a CPU run blocks while it trains.
import init, { train } from "./pkg/headroom_web.js";

onmessage = async ({ data }) => {
  try {
    await init();
    const webgpu = "gpu" in navigator && (await navigator.gpu.requestAdapter()) !== null;
    await train(data.query, webgpu, (line) => postMessage({ line }));
    postMessage({ done: true });
  } catch (e) {
    postMessage({ error: e instanceof Error ? e.message : String(e) });
  }
};
