#!/usr/bin/python3
"""A fault-injecting TCP proxy for the multi-host tests (this kernel has tbf
but no netem, so delay, loss and partitions are made here).

    faultproxy.py --listen HOST:PORT --target HOST:PORT --control FILE

Forwards every connection to --target. The faults are read from --control
(JSON, re-read every 100 ms, so a test changes them while a job runs):

    {"delay_ms": 20,      each chunk is forwarded this much later (ordered)
     "loss": 0.01,        each chunk is held back as by a TCP retransmission
                          (loss_stall_ms, default 200) with this probability:
                          TCP turns a lost packet into a stall, not a gap
     "loss_stall_ms": 200,
     "partition": false,  while true, nothing is forwarded either way and new
                          connections wait: a link that is cut, not refused
     "reset": false}      while true, every connection is closed at once and
                          new ones are refused: a peer that vanished

It prints "faultproxy listening on HOST:PORT" once it listens, and on
SIGTERM what it did ("faultproxy: N connections, B bytes, ..."), also
written to --stats as JSON when given.
"""

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time

DEFAULTS = {"delay_ms": 0.0, "loss": 0.0, "loss_stall_ms": 200.0,
            "partition": False, "reset": False}


class Faults:
    def __init__(self, path, seed):
        self.path = path
        self.mtime = None
        self.values = dict(DEFAULTS)
        self.random = random.Random(seed)
        # held: chunks that waited out a partition.
        self.stats = {"connections": 0, "bytes": 0, "stalls": 0, "resets": 0,
                      "held": 0}
        self.writers = set()

    def refresh(self):
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self.mtime:
            return
        try:
            with open(self.path) as f:
                values = json.load(f)
        except (OSError, ValueError):
            return  # mid-write: the next look reads it whole
        self.mtime = mtime
        self.values = dict(DEFAULTS)
        self.values.update(values)
        if self.values["reset"]:
            for w in list(self.writers):
                w.close()
                self.stats["resets"] += 1

    def __getitem__(self, key):
        return self.values[key]


async def pump(reader, writer, faults):
    """One direction: read, wait out the faults, write, in order."""
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            if faults["partition"]:
                faults.stats["held"] += 1
            while faults["partition"]:
                await asyncio.sleep(0.05)
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            faults.stats["bytes"] += len(data)

    sender = asyncio.ensure_future(send())
    try:
        while not faults["reset"]:
            data = await reader.read(65536)
            if not data:
                break
            delay = faults["delay_ms"] / 1000
            if faults["loss"] > 0 and faults.random.random() < faults["loss"]:
                delay += faults["loss_stall_ms"] / 1000
                faults.stats["stalls"] += 1
            await queue.put((time.monotonic() + delay, data))
    except (ConnectionError, OSError):
        pass
    finally:
        await queue.put((0, None))
        try:
            await sender
        except (ConnectionError, OSError):
            pass
        writer.close()


async def serve(args, faults):
    host, port = args.target.rsplit(":", 1)

    async def handle(client_reader, client_writer):
        while faults["partition"] and not faults["reset"]:
            await asyncio.sleep(0.05)
        if faults["reset"]:
            client_writer.close()
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(
                host, int(port))
        except OSError:
            client_writer.close()
            return
        faults.stats["connections"] += 1
        faults.writers.update({client_writer, server_writer})
        await asyncio.gather(pump(client_reader, server_writer, faults),
                             pump(server_reader, client_writer, faults))
        faults.writers.difference_update({client_writer, server_writer})

    listen_host, listen_port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, listen_host, int(listen_port))
    bound = server.sockets[0].getsockname()
    print(f"faultproxy listening on {bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def watch():
        while not stop.is_set():
            faults.refresh()
            await asyncio.sleep(0.1)

    watcher = asyncio.ensure_future(watch())
    await stop.wait()
    watcher.cancel()
    server.close()
    print("faultproxy: " + ", ".join(f"{v} {k}" for k, v in
                                     faults.stats.items()), flush=True)
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(faults.stats, f)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT (port 0: any)")
    p.add_argument("--target", required=True, help="HOST:PORT to forward to")
    p.add_argument("--control", required=True,
                   help="JSON file of the faults (missing: none)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the loss draws (default 0)")
    p.add_argument("--stats", help="where to write the counts at exit")
    args = p.parse_args(argv)
    for flag in ("listen", "target"):
        value = getattr(args, flag)
        if ":" not in value or not value.rsplit(":", 1)[1].isdigit():
            p.error(f"--{flag}: {value!r} is not HOST:PORT")
    faults = Faults(args.control, args.seed)
    faults.refresh()
    asyncio.run(serve(args, faults))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
