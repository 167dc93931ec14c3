"""The training image (training/Dockerfile), built where a user builds it.

With a Docker engine, `make image` is `docker build` on rayproject/ray, as a user's CI does. Without one (this
machine, a CI runner without a daemon), the same Dockerfile is built by buildah (Debian's package, no daemon) on a
base made here from Debian packages and PyPI (images.debian_base) that stands in for rayproject/ray: the same Ray,
Python and user (ray, uid 1000, gid 100). Its Python packages come from a wheelhouse pip fills on the host
(images.wheelhouse), so the build itself needs no network and no registry.

Modules: builders (docker or buildah), debian_base, wheelhouse, checks (what a built image must satisfy),
archive (the image as an OCI archive, for a cluster without a registry), cli (python -m images).
"""
