"""`wsn`: a command-line client for any WS-Notification broker or producer
(WS-BaseNotification 1.3, WS-BrokeredNotification 1.3, WS-Topics 1.3), like mosquitto_sub
and mosquitto_pub for MQTT. Standalone: it speaks SOAP 1.2 with WS-Addressing 1.0 and
imports nothing of the gateway, so it works against other implementations too.

Modules: `wsp` (SOAP requests, EPRs, faults as one-line errors), `messages` (what a
received notification looks like on the terminal), `sub` (subscribe: pull point or a
local push consumer), `commands` (pub, pull, renew, unsubscribe, pause, resume, topics,
ls), `cli` (the argument parser and the error policy).
"""
