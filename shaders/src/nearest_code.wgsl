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
var<workgroup> shared_codes: u32;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) global: vec3<u32>,
        @builtin(local_invocation_id) local: vec3<u32>) {
    let positions = params.x;
    // The barriers below need uniform control flow, and WGSL counts a value read from a
    // read_write storage buffer as non-uniform: Chrome's compiler (Tint) refuses the loop
    // over codes unless its bound comes through workgroupUniformLoad (naga let it pass).
    if (local.x == 0u) {
        shared_codes = params.y;
    }
    let codes = workgroupUniformLoad(&shared_codes);
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
    // f32's largest finite value, exactly: Tint refuses the decimal 3.4028235e38, which
    // rounds above it.
    var best_dist = bitcast<f32>(0x7f7fffffu);
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
