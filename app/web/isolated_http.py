"""A static web server for the page: Python's, with the two headers that make a page
cross-origin isolated, without which a browser gives it no SharedArrayBuffer and the page's
build with threads cannot start (app/web/build).

Usage: python3 app/web/isolated_http.py DIR [PORT (default 8080)]
"""

import functools
import http.server
import sys

ISOLATION = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
}


class IsolatedHandler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        for name, value in ISOLATION.items():
            self.send_header(name, value)
        super().end_headers()


def main():
    folder = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8080
    handler = functools.partial(IsolatedHandler, directory=folder)
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
