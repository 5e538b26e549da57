"""wsn-edge gateway: a WS-Notification broker (WS-BaseNotification 1.3,
WS-BrokeredNotification 1.3, WS-Topics 1.3) over aiohttp."""
