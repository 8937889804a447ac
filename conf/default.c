/*
 * default.c: the configuration corral runs when started without -c, so a
 * new user sees it serve at once.  It is also a small commented example.
 */
#include "config.h"

const char conf_default_text[] =
    "# corral's built-in configuration, used when no -c FILE is given.\n"
    "# Save it to a file (corral.conf) and start with: corral -c corral.conf\n"
    "\n"
    "# One worker thread per CPU this process may run on.\n"
    "workers auto;\n"
    "\n"
    "# How the workers share new connections.  auto picks round-robin, which\n"
    "# wakes one idle worker per connection, in turn; `corral --probe` shows\n"
    "# what this kernel supports.\n"
    "wakeup auto;\n"
    "\n"
    "# Metrics (GET /metrics, Prometheus format) and status, on loopback only.\n"
    "admin {\n"
    "    listen 127.0.0.1:9090;\n"
    "}\n"
    "\n"
    "server {\n"
    "    # deferred: the kernel hands a connection over once its request has\n"
    "    # arrived: it is read at once, and a silent client holds no descriptor.\n"
    "    listen 127.0.0.1:8080 deferred;\n"
    "\n"
    "    # Replace this with `proxy_pass http://127.0.0.1:3000;` (or the name of\n"
    "    # an upstream block) to put corral in front of your application.\n"
    "    location / {\n"
    "        return 200 \"corral is running\\n\";\n"
    "    }\n"
    "}\n";
