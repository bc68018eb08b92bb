"""The container image (Dockerfile.kimi26-dflash): build command, tags and base-image pinning."""
