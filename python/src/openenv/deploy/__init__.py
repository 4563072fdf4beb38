"""Deployment: environment images, containers, Spaces and new environment projects.

* :mod:`~openenv.deploy.engine`: the Docker engine, the image contract's ports and labels;
* :mod:`~openenv.deploy.project`: environment directories (``pyproject.toml``);
* :mod:`~openenv.deploy.wheelhouse`: wheels for offline image builds;
* :mod:`~openenv.deploy.baseimage`: the debootstrapped base image;
* :mod:`~openenv.deploy.build`: ``openenv build``;
* :mod:`~openenv.deploy.run`: hardened containers and clients that own them;
* :mod:`~openenv.deploy.netns`: reaching a ``--network none`` container;
* :mod:`~openenv.deploy.cleanup`: ``openenv ps`` / ``openenv cleanup``;
* :mod:`~openenv.deploy.space`: Hugging Face Spaces (``openenv push``);
* :mod:`~openenv.deploy.scaffold`: ``openenv init``.

Engine-facing modules need the ``docker`` extra; nothing is imported here, so ``openenv init``
and ``openenv push`` work without it.
"""
