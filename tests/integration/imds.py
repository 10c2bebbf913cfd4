"""imds.py - an instance metadata service (IMDSv2) on loopback, for the
credential tests.

    imds.py PORTFILE ACCESS_KEY SECRET_KEY EXPIRES_IN_S [TOKEN]

Serves PUT /latest/api/token (needs X-aws-ec2-metadata-token-ttl-seconds)
and, with that token in X-aws-ec2-metadata-token (401 without it), GET
/latest/meta-data/iam/security-credentials/ (the role) and .../bfs-role
(the credentials, expiring EXPIRES_IN_S from each request, with session
token TOKEN, default "session-token-for-tests").  Each request
adds a line to PORTFILE.log.  Runs until killed.
"""
import datetime
import http.server
import json
import os
import sys

PORTFILE, AK, SK, EXP = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
SESSION = sys.argv[5] if len(sys.argv) > 5 else "session-token-for-tests"
TOKEN = "imds-token-7f3a"


class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, code, body):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
        with open(PORTFILE + ".log", "a") as f:
            f.write("%s %s %d\n" % (self.command, self.path, code))

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self.reply(200, TOKEN)
        else:
            self.reply(400, "no ttl")

    def do_GET(self):
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            return self.reply(401, "no token")
        base = "/latest/meta-data/iam/security-credentials/"
        if self.path == base:
            return self.reply(200, "bfs-role\n")
        if self.path == base + "bfs-role":
            exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=EXP)
            return self.reply(200, json.dumps({
                "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": AK,
                "SecretAccessKey": SK, "Token": SESSION,
                "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}))
        self.reply(404, "not found")


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
srv.serve_forever()
