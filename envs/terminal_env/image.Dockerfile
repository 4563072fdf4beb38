# terminal_env's own lines in its image (openenv build renders them into the template; docs/images.md).
# git, for the git task families (debs.txt: git and what it needs beyond the base), from the
# .debs `make images` stages in debs/ (apt-get download on the host): no network here.
COPY debs/ /tmp/debs/
RUN dpkg -i /tmp/debs/*.deb >/dev/null && rm -rf /tmp/debs && git --version
