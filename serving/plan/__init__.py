"""The deployment plan, decided before any change: the container, the images, the GPU plan, the stand-in seam."""
