"""Image batches, in one place: decoding with energon's `image_decode` modes (decode, decode_into, resize,
scratch), decoding a batch's images straight into recycled shared-memory slots (batch, slots), the main-process
side of those slots and GPU normalisation (device), and `image_device_decode=True`: compressed bytes shipped by
the workers (jpeg_bytes) and decoded in batches on the loader's device (gpu_decode).

The core loader (energon_arrow.loader) and the part decoder (energon_arrow.samples.decoders) use these modules;
nothing here imports the energon-compatibility layer (energon_arrow.energon).
"""
