"""The local cluster keeps a client's connection open across requests, as a real API server does:
a Node (which the API server answers chunked, being large) and a list come back whole over one
TLS connection, and only a watch ends it. Before, every chunked answer was relayed as a stream
that closed the connection, so each request of the operator, the agents and kubectl paid a new
TLS handshake (and cpprest's load of the system CA store): the node agent's 100 ms node poll
alone cost 30% of a core in the tests.

Runs on whichever back end the local cluster picks (the real control plane where its assets are).
"""

import base64
import http.client
import json
import os
import shutil
import ssl
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from localcluster_case import CLUSTER, start, stop_group  # noqa: E402


def kubeconfig_field(text, name):
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no %s in the kubeconfig" % name)


class LocalClusterKeepAliveTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="phalanx-keepalive-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.log = open(os.path.join(self.dir, "localcluster.log"), "wb")
        self.addCleanup(self.log.close)
        self.cluster = start([CLUSTER, "--kubeconfig-out", kubeconfig, "--work-dir",
                              os.path.join(self.dir, "cluster"), "--nodes", "1"], self.log)
        self.addCleanup(stop_group, self.cluster)
        ready = harness.read_line(self.cluster, "ready ", 120)
        self.assertIsNotNone(ready, "phalanx-localcluster did not print ready")
        print("local cluster:", ready.strip())
        with open(kubeconfig) as f:
            text = f.read()
        server = kubeconfig_field(text, "server")
        ca = base64.b64decode(kubeconfig_field(text, "certificate-authority-data")).decode()
        self.token = kubeconfig_field(text, "token")
        host, port = server[len("https://"):].rsplit(":", 1)
        context = ssl.create_default_context(cadata=ca)
        context.check_hostname = False  # the serving certificate names 127.0.0.1 as an IP SAN
        self.conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
        self.addCleanup(self.conn.close)

    def get(self, path):
        self.conn.request("GET", path, headers={"Authorization": "Bearer " + self.token,
                                                "Accept": "application/json"})
        response = self.conn.getresponse()
        body = response.read()
        return response, body

    def test_answers_that_end_keep_the_connection_and_a_watch_ends_it(self):
        # The node registers shortly after ready: the first answers may be 404s, which must
        # keep the connection too.
        socket = None
        for path in ["/api/v1/nodes/node-0", "/api/v1/namespaces/default/pods",
                     "/api/v1/nodes/node-0", "/api/v1/nodes"]:
            response, body = self.get(path)
            self.assertIn(response.status, (200, 404), body[:300])
            json.loads(body)  # whole: the JSON parses
            self.assertNotEqual((response.getheader("Connection") or "").lower(), "close",
                                "%s ended the connection" % path)
            self.assertIsNotNone(self.conn.sock, "%s: the connection was closed" % path)
            if socket is not None:
                self.assertIs(self.conn.sock, socket, "%s went over a new connection" % path)
            socket = self.conn.sock
        # A watch streams on this connection until it ends (timeoutSeconds), then the
        # connection goes with it.
        response, body = self.get("/api/v1/nodes?watch=true&timeoutSeconds=1")
        self.assertEqual(response.status, 200, body[:300])
        self.assertIn(b'"ADDED"', body)


if __name__ == "__main__":
    unittest.main()
