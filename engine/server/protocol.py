"""uvicorn's HTTP/1.1 protocol (h11) with its own refusals in OpenAI's shape.

A request whose head h11 cannot parse (a malformed request line, a Content-Length that is not a
number, a header too large) never reaches the app: uvicorn answers it itself, in plain text. This
protocol answers the same 400 as a JSON error, as the app answers everything else.
"""
from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import errors

BAD_REQUEST = ("the request is not valid HTTP/1.1 (a malformed request line or header, such as a "
               "Content-Length that is not a number)")


class JsonErrorsH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(errors.error_body(400, BAD_REQUEST)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        try:
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:     # a response was under way already: nothing more can be said
            pass
        self.transport.close()
