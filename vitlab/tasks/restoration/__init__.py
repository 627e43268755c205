"""Image restoration (IPT): super-resolution, denoising and deraining of photographs; metrics as IPT reports them."""
