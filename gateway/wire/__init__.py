"""The wire layer: SOAP 1.1/1.2 envelopes (soap), WS-Addressing and endpoint references
(addressing), WS-BaseFaults (faults), namespace and action URIs (ns), hardened XML parsing
and the XML Schema time types (xmlutil). It knows nothing of the broker's resources; the
role modules (gateway.producer, manager, notify, pullpoints, registrations, wsrf) build on
it."""
