"""Pure protocol layer: bamboo entries, hashes, keys, CBOR and message codecs. No I/O."""
