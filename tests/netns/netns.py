"""Separate hosts for the fleet tests: network namespaces on a bridge.

Network(tag) makes a switch namespace holding a bridge, and each
add_host(name) a namespace of its own joined to it by a veth pair, with an
address on 10.77.N.0/24 (N from the tag) and its own loopback. Processes run
in a host with popen(); limit_bandwidth() puts a token bucket (tc tbf, which
this kernel has) on a host's link; delay, loss and partitions come from
faultproxy.py beside this file, run in the namespace of the server it
fronts. close() kills what was started and deletes every namespace and link
it made (the veths go with their namespaces). Each process also gets a
/dev/shm of its own (a private tmpfs in a mount namespace of its own), as
on separate machines: the fleet's shared-memory transport must not join
two "hosts" (docs/DATA_PLANE.md). Needs CAP_NET_ADMIN and CAP_SYS_ADMIN:
available() says why not when they are missing.
"""

import os
import subprocess
import time

IP = "/usr/sbin/ip"
TC = "/usr/sbin/tc"
UNSHARE = "/usr/bin/unshare"
# Runs its arguments with a /dev/shm of their own (the mount namespace
# unshare makes is private: the host's /dev/shm is left alone).
OWN_SHM = [UNSHARE, "--mount", "sh", "-c",
           'mount -t tmpfs -o size=256m petra-shm /dev/shm && exec "$0" "$@"']


def run(argv):
    subprocess.run(argv, check=True, capture_output=True, text=True)


def available():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool in (IP, TC):
        if not os.access(tool, os.X_OK):
            return "%s is missing (Debian's iproute2)" % tool
    if subprocess.run(OWN_SHM + ["true"], capture_output=True).returncode:
        return "cannot give a process its own /dev/shm (unshare --mount)"
    name = "petra-probe-%d" % os.getpid()
    try:
        run([IP, "netns", "add", name])
    except subprocess.CalledProcessError as e:
        return "cannot make a network namespace: %s" % e.stderr.strip()
    run([IP, "netns", "del", name])
    return None


class Network:
    def __init__(self, tag):
        # Interface names are at most 15 characters.
        self.prefix = "pt%d" % (os.getpid() % 100000)
        self.subnet = "10.77.%d" % (os.getpid() % 250)
        self.switch = self.prefix + "sw"
        self.hosts = {}  # name -> (namespace, address, device)
        self.processes = []
        run([IP, "netns", "add", self.switch])
        run([IP, "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        run([IP, "-n", self.switch, "link", "set", "br0", "up"])

    def add_host(self, name):
        index = len(self.hosts)
        ns = "%s%s" % (self.prefix, name)
        address = "%s.%d" % (self.subnet, index + 2)
        inside, outside = "%sh%d" % (self.prefix, index), "%sb%d" % (
            self.prefix, index)
        run([IP, "netns", "add", ns])
        run([IP, "link", "add", inside, "type", "veth", "peer", "name",
             outside])
        run([IP, "link", "set", inside, "netns", ns])
        run([IP, "link", "set", outside, "netns", self.switch])
        run([IP, "-n", self.switch, "link", "set", outside, "master", "br0"])
        run([IP, "-n", self.switch, "link", "set", outside, "up"])
        run([IP, "-n", ns, "link", "set", "lo", "up"])
        run([IP, "-n", ns, "addr", "add", address + "/24", "dev", inside])
        run([IP, "-n", ns, "link", "set", inside, "up"])
        self.hosts[name] = (ns, address, inside)
        return address

    def address(self, host):
        return self.hosts[host][1]

    def popen(self, host, argv, **kwargs):
        """Starts argv in `host`; close() stops it."""
        p = subprocess.Popen(
            [IP, "netns", "exec", self.hosts[host][0]] + OWN_SHM + argv,
            **kwargs)
        self.processes.append(p)
        return p

    def limit_bandwidth(self, host, rate):
        """A token bucket of `rate` (tc units: "100mbit") on host's link."""
        ns, _, device = self.hosts[host]
        run([IP, "netns", "exec", ns, TC, "qdisc", "add", "dev", device,
             "root", "tbf", "rate", rate, "burst", "256kbit", "latency",
             "50ms"])

    def close(self):
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        deadline = time.time() + 20
        for p in self.processes:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for pipe in (p.stdin, p.stdout, p.stderr):
                if pipe is not None:
                    pipe.close()
        for ns, _, _ in self.hosts.values():
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
        subprocess.run([IP, "netns", "del", self.switch], capture_output=True)
