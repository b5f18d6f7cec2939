//! The nearest-code kernel: valid WGSL by naga, and the same indices as a plain reference on
//! the machine's adapter (Mesa's lavapipe where there is no GPU; `.ci/run` installs it).

use headroom_shaders::{NEAREST_CODE, NEAREST_CODE_MAX_DIM, NEAREST_CODE_WORKGROUP};
use wgpu::util::DeviceExt;

#[test]
fn the_wgsl_validates() {
    let module = naga::front::wgsl::parse_str(NEAREST_CODE).expect("WGSL parses");
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .expect("WGSL validates");
}

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn squared_distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The plain reference: every distance, then the first minimum.
fn nearest(latents: &[f32], codebook: &[f32], dim: usize) -> Vec<u32> {
    latents
        .chunks(dim)
        .map(|z| {
            let mut best = (0, f32::INFINITY);
            for (i, e) in codebook.chunks(dim).enumerate() {
                let d = squared_distance(z, e);
                if d < best.1 {
                    best = (i as u32, d);
                }
            }
            best.0
        })
        .collect()
}

struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
}

fn gpu() -> Gpu {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::all(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = futures_lite::future::block_on(
        instance.request_adapter(&wgpu::RequestAdapterOptions::default()),
    )
    .expect(
        "no wgpu adapter: install a Vulkan driver (Debian: mesa-vulkan-drivers libvulkan1, \
         as .ci/run does)",
    );
    let (device, queue) =
        futures_lite::future::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("nearest-code test"),
            ..Default::default()
        }))
        .expect("the adapter opens a device");
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("nearest_code.wgsl"),
        source: wgpu::ShaderSource::Wgsl(NEAREST_CODE.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("nearest code"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    Gpu {
        device,
        queue,
        pipeline,
    }
}

impl Gpu {
    fn nearest(&self, latents: &[f32], codebook: &[f32], dim: usize) -> Vec<u32> {
        let positions = latents.len() / dim;
        let codes = codebook.len() / dim;
        let storage = |label, data: &[u8]| {
            self.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some(label),
                    contents: data,
                    usage: wgpu::BufferUsages::STORAGE,
                })
        };
        let latents = storage("latents", as_bytes(latents));
        let codebook = storage("codebook", as_bytes(codebook));
        let size = (positions * 4) as u64;
        let indices = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("indices"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let params = [positions as u32, codes as u32, dim as u32, 0];
        let params = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: as_bytes(&params),
                usage: wgpu::BufferUsages::STORAGE,
            });
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                entry(0, &latents),
                entry(1, &codebook),
                entry(2, &indices),
                entry(3, &params),
            ],
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups((positions as u32).div_ceil(NEAREST_CODE_WORKGROUP), 1, 1);
        }
        encoder.copy_buffer_to_buffer(&indices, 0, &readback, 0, size);
        self.queue.submit([encoder.finish()]);
        let slice = readback.slice(..);
        slice.map_async(wgpu::MapMode::Read, |result| {
            result.expect("the readback buffer maps")
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("the device finishes");
        let data = slice
            .get_mapped_range()
            .expect("the mapped range is readable");
        data.chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}

fn entry(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: buffer.as_entire_binding(),
    }
}

fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: f32 and u32 have no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

#[test]
fn the_kernel_finds_the_same_codes_as_the_plain_reference() {
    let gpu = gpu();
    // The default model's shape (a micro-batch of 3 patches: 192 positions, 512 codes of 64),
    // then sizes that are not multiples of the workgroup or the codebook tile, and a smaller
    // dimension.
    for (positions, codes, dim, seed) in [
        (192, 512, 64, 1),
        (1, 512, 64, 2),
        (65, 33, 64, 3),
        (200, 100, 7, 4),
        (130, 1, NEAREST_CODE_MAX_DIM as usize, 5),
    ] {
        let latents = values(positions * dim, seed);
        let codebook = values(codes * dim, seed + 100);
        let expected = nearest(&latents, &codebook, dim);
        let found = gpu.nearest(&latents, &codebook, dim);
        assert_eq!(found.len(), positions);
        for (p, (&f, &e)) in found.iter().zip(&expected).enumerate() {
            if f != e {
                // Only an exact tie in f32 (summed in another order on the device) may pick
                // another code; its distance must then equal the minimum.
                let z = &latents[p * dim..(p + 1) * dim];
                let df = squared_distance(z, &codebook[f as usize * dim..(f as usize + 1) * dim]);
                let de = squared_distance(z, &codebook[e as usize * dim..(e as usize + 1) * dim]);
                assert!(
                    (df - de).abs() <= 1e-6 * de.max(1e-12),
                    "{positions}x{codes}x{dim}, position {p}: code {f} ({df}) against {e} ({de})"
                );
            }
        }
    }
}

/// Two equal codes in different tiles: every position takes the lower index, as argmin does.
#[test]
fn a_tie_goes_to_the_lower_index() {
    let gpu = gpu();
    let dim = 64;
    let mut codebook = values(40 * dim, 7);
    let (low, high) = (3, 35); // tiles of 32 codes: one in each
    let copy: Vec<f32> = codebook[low * dim..(low + 1) * dim].to_vec();
    codebook[high * dim..(high + 1) * dim].copy_from_slice(&copy);
    let latents: Vec<f32> = (0..70).flat_map(|_| copy.iter().copied()).collect();
    assert_eq!(gpu.nearest(&latents, &codebook, dim), vec![low as u32; 70]);
}
