# chess_env's own lines in its image (openenv build renders them into the template; docs/images.md).
# Debian's stockfish, from the .deb staged in debs/ (apt-get download stockfish): no network.
COPY debs/ /tmp/debs/
RUN dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs && /usr/games/stockfish quit
