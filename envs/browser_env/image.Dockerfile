# browser_env's own lines in its image (openenv build renders them into the template; docs/images.md).

# openenv-hook: stages
# ---- chromium: the base plus Debian's Chromium and what it needs beyond the base, from the
# .debs staged in debs/ (tools/stage_debs.sh: apt's resolution against this base, downloaded on
# the host): no network. A stage of its own, copied as one tree into runtime-base (the runtime
# stage's base), so that the .debs (about 200 MB) never become a layer of the image. ----
FROM ${BASE_IMAGE} AS chromium
COPY debs/ /tmp/debs/
RUN cd /tmp/debs \
 && for batch in batch-*.txt; do dpkg --force-unsafe-io -i $(cat "$batch") >/dev/null || exit 1; done \
 && rm -rf /tmp/debs /var/cache/debconf/*-old /var/log/* /usr/share/doc /usr/share/man /usr/share/info \
 && chromium --version

FROM scratch AS runtime-base
COPY --from=chromium / /

# openenv-hook: runtime
# One Chromium (BROWSER_ENV_BROWSERS=1): with 4 pages it runs ~200 threads, two ~310, and
# start_container's pids limit is 512.
ENV BROWSER_ENV_CHROMIUM=/usr/bin/chromium \
    BROWSER_ENV_BROWSERS=1
