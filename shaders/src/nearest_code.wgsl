// Nearest codebook entry per latent position (squared L2), one invocation per position.
// The codebook passes through workgroup memory TILE codes at a time, so each code is read
// from device memory once per workgroup rather than once per position.

const WORKGROUP: u32 = 64u;
const MAX_DIM: u32 = 64u;
const TILE: u32 = 32u;

// Every binding read_write, even those only read: cubecl places small allocations in one
// shared wgpu buffer, and a buffer bound read-only and read-write in one dispatch fails
// wgpu's validation. cubecl's WGSL compiler declares every binding this way too, unless
// each allocation has a buffer of its own (its `exclusive-memory-only` feature).
@group(0) @binding(0) var<storage, read_write> latents: array<f32>;
@group(0) @binding(1) var<storage, read_write> codebook: array<f32>;
@group(0) @binding(2) var<storage, read_write> indices: array<u32>;
@group(0) @binding(3) var<storage, read_write> params: vec4<u32>;

var<workgroup> tile: array<f32, 2048>; // TILE x MAX_DIM

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) global: vec3<u32>,
        @builtin(local_invocation_id) local: vec3<u32>) {
    let positions = params.x;
    let codes = params.y;
    let dim = params.z;
    let position = global.x;
    let in_range = position < positions;

    var z: array<f32, 64>;
    if (in_range) {
        for (var d = 0u; d < dim; d = d + 1u) {
            z[d] = latents[position * dim + d];
        }
    }

    var best = 0u;
    var best_dist = 3.4028235e38;
    for (var start = 0u; start < codes; start = start + TILE) {
        let count = min(TILE, codes - start);
        // Every invocation helps load the tile, in range or not, before the barrier.
        for (var i = local.x; i < count * dim; i = i + WORKGROUP) {
            tile[i] = codebook[start * dim + i];
        }
        workgroupBarrier();
        if (in_range) {
            for (var c = 0u; c < count; c = c + 1u) {
                var dist = 0.0;
                for (var d = 0u; d < dim; d = d + 1u) {
                    let diff = z[d] - tile[c * dim + d];
                    dist = dist + diff * diff;
                }
                // Strictly less: ties keep the lower index, as argmin does.
                if (dist < best_dist) {
                    best_dist = dist;
                    best = start + c;
                }
            }
        }
        workgroupBarrier();
    }
    if (in_range) {
        indices[position] = best;
    }
}
