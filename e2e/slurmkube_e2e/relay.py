"""A TCP relay from the slot's bridge address to the API server on loopback.

The API server listens on 127.0.0.1 only; a real node's kubelet lives in its
own network namespace, whose loopback is not the host's. The relay listens on
the bridge's host address (10.250.<slot>.1, reachable only from the slot's
private L2 segment) and copies bytes both ways; TLS stays end to end (the
kubelets' kubeconfig names the server `localhost`, which its certificate has).

    python -m slurmkube_e2e.relay LISTEN_HOST PORT TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def _serve(listen: str, port: int, target: str, target_port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target, target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, listen, port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    listen, port, target, target_port = args[0], int(args[1]), args[2], int(args[3])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(listen, port, target, target_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
