"""Notifications: channel specs and the message every channel sends, notification plans,
signatures (Standard Webhooks), acknowledgement links, addresses, the inbox and its streams.
Pure: no I/O."""
