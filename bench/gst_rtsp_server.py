#!/usr/bin/python3
"""GStreamer's RTSP server serving one MPEG-TS file at /clip, for
bench/serve.sh: the same content nagare serve plays, paced by GStreamer
(tsparse timestamps, rtpmp2tpay, 7 TS packets per RTP packet).
Usage: gst_rtsp_server.py FILE PORT"""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
path, port = sys.argv[1], sys.argv[2]
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(
    f'( filesrc location="{path}" ! tsparse set-timestamps=true ! '
    "rtpmp2tpay name=pay0 pt=33 )"
)
factory.set_shared(False)
server.get_mount_points().add_factory("/clip", factory)
server.attach(None)
print(f"gst-rtsp-server listening on 127.0.0.1:{port}", flush=True)
GLib.MainLoop().run()
