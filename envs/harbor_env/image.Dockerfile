# harbor_env's own lines in its image (openenv build renders them into the template; docs/images.md).
# What the shipped tasks' Dockerfiles install (debs.txt: git and what it needs beyond the base),
# from the .debs `make images` stages in debs/ (apt-get download on the host): no network here.
# A task whose Dockerfile installs a Debian package not on this system is refused, naming it.
COPY debs/ /tmp/debs/
RUN dpkg -i /tmp/debs/*.deb >/dev/null && rm -rf /tmp/debs && git --version
