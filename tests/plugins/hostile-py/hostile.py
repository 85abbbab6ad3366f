"""An orders parser in Python that turns hostile on the records that ask it to, `{"attack": ...}`:
the Python members of the adversarial suite (tests/python.rs). Each attack must be contained by
the same limits and grants as a Rust plugin's, end as that record's dead letter, and cost no
other record.

- `loop`: never returns (the call deadline must stop it);
- `memory`: allocates until refused (the memory cap);
- `read`: opens /etc/passwd, outside any grant;
- `net`: `import socket` and connect to the TCP address in `"to"`, without a network grant.
"""

import socket

import weir


class Hostile(weir.Parser):
    def parse(self, record, out):
        order = record.json()
        attack = order.get("attack")
        if attack == "loop":
            n = 0
            while True:
                n += 1
        elif attack == "memory":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        elif attack == "read":
            with open("/etc/passwd") as f:
                out.emit(0, None, {"stolen": f.read()})
        elif attack == "net":
            # A numeric address: the connect itself is what the sandbox must refuse.
            host, port = order["to"].rsplit(":", 1)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.connect((host, int(port)))
                s.sendall(b"hello")
            out.emit(0, None, {"connected": True})
        else:
            out.emit_json(order["order_ts"], None, record.value)

