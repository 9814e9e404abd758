"""Sharing the dashboard: a secret token beyond loopback (as Jupyter does). The printed URL carries the token
(``http://HOST:PORT/?token=...``); the first request with it sets an HttpOnly, SameSite=Strict cookie and is
redirected to the same address without it, so the token leaves the address bar (and every shared link), and
later requests — the page, its layout, every callback, every asset — carry the cookie. Anything else is a bare
403: no page, no traceback, no model name.

Added to the Dash app's Flask server with ``before_request``, the way Flask (and Dash) are meant to be
extended; the check runs before every other handler, Dash's own routes included.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

from flask import Flask, Response, redirect, request

QUERY = "token"  # the URL parameter the printed address carries (Jupyter's name)


def cookie_name(token: str) -> str:
    """The cookie the token is kept in: named after a digest of the token, so that two dashboards on one host
    (two ports, two tokens) do not overwrite each other's cookie.

    >>> cookie_name("a-long-enough-secret")[:12]
    'probe-token-'
    """
    return "probe-token-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def require_token(server: Flask, token: str) -> None:
    """Serve `server` only to requests that carry `token`: in the URL's ``?token=`` (then kept in a cookie and
    redirected without it) or in the cookie; every other request is answered 403 with an empty body.

    Parameters
    ----------
    server : flask.Flask
        The Dash app's server (``dash_app.server``).
    token : str
        The secret (compared in constant time, :func:`hmac.compare_digest`).

    Examples
    --------
    >>> from flask import Flask
    >>> server = Flask("example")
    >>> _ = server.route("/")(lambda: "the dashboard")
    >>> require_token(server, "a-long-enough-secret")
    >>> client = server.test_client()
    >>> client.get("/").status_code, client.get("/").data
    (403, b'')
    >>> answer = client.get("/?token=a-long-enough-secret")
    >>> answer.status_code, answer.headers["Location"]
    (302, '/')
    >>> client.get("/").data  # the cookie it set
    b'the dashboard'
    """
    secret = token.encode()
    name = cookie_name(token)

    def matches(value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), secret)

    @server.before_request
    def _check_token():
        given = request.args.get(QUERY)
        if matches(given):  # the printed URL: keep the token in a cookie, take it out of the address
            rest = [(key, value) for key, value in request.args.items(multi=True) if key != QUERY]
            answer = redirect(request.path + ("?" + urlencode(rest) if rest else ""), code=302)
            answer.set_cookie(name, token, httponly=True, samesite="Strict", path="/")
            return answer
        if matches(request.cookies.get(name)):
            return None
        return Response(b"", status=403, mimetype="text/plain")

    # the check must come first: before the app's other request hooks (a 404 for an unknown asset says
    # nothing of the app either, but a refusal must not depend on which hooks run before it)
    hooks = server.before_request_funcs.setdefault(None, [])
    hooks.insert(0, hooks.pop(hooks.index(_check_token)))
