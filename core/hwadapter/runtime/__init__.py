"""Plugin discovery, devices, device memory and the caching allocator."""
