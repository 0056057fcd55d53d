"""What every API shares on the wire: error bodies, Server-Sent Events, the key check, the payload limit."""
