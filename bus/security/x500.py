"""A certificate's subject as Java's `X500Principal.getName()` renders it (RFC 2253), from the DER bytes.

`ssl.principal.mapping.rules` are matched against this string on a Kafka broker, so it must be Java's
rendering to the character: RDNs last-to-first joined by `,`, multi-valued RDNs joined by `+` in encoded
order, keywords only for CN, C, L, ST, O, OU, STREET, DC and UID (any other attribute, e.g. emailAddress,
as `1.2.840.113549.1.9.1=#<hex of its DER>`), and Java's escaping (`,=+<>#;"\\` anywhere, spaces at either
end). Python's `getpeercert()` dict loses the string types and the order within an RDN, so we read the
subject from `getpeercert(binary_form=True)` with a minimal DER reader instead.
"""

from __future__ import annotations

_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# Directory string types Java renders as text (AVA.isDerString, non-canonical), with their encodings.
_STRING_TYPES = {0x0C: "utf-8", 0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1B: "latin-1",
                 0x1E: "utf-16-be"}
_ESCAPED = ',=+<>#;"\\'
_SEQUENCE, _SET, _OID, _CONTEXT_0 = 0x30, 0x31, 0x06, 0xA0


class CertificateError(ValueError):
    """Bytes that are not a DER X.509 certificate."""


def _tlv(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """(tag, start of value, end of value, start of the whole element) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise CertificateError("truncated DER element")
    tag, length = data[pos], data[pos + 1]
    start = pos + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or start + count > len(data):
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[start:start + count], "big")
        start += count
    if start + length > len(data):
        raise CertificateError("truncated DER element")
    return tag, start, start + length, pos


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    out = []
    pos = start
    while pos < end:
        element = _tlv(data, pos)
        if element[2] > end:
            raise CertificateError("DER element overruns its parent")
        out.append(element)
        pos = element[2]
    return out


def _expect(element: tuple[int, int, int, int], tag: int) -> tuple[int, int, int, int]:
    if element[0] != tag:
        raise CertificateError(f"expected DER tag {tag:#x}, found {element[0]:#x}")
    return element


def _oid(value: bytes) -> str:
    if not value:
        raise CertificateError("empty OID")
    first = min(value[0] // 40, 2)
    arcs = [first, value[0] - 40 * first]
    number = 0
    for byte in value[1:]:
        number = (number << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(number)
            number = 0
    return ".".join(map(str, arcs))


def subject_name(cert_der: bytes) -> str:
    """The subject of a DER certificate as Java's `X500Principal.getName()` (RFC 2253) renders it."""
    certificate = _expect(_tlv(cert_der, 0), _SEQUENCE)
    tbs = _expect(_children(cert_der, certificate[1], certificate[2])[0], _SEQUENCE)
    fields = _children(cert_der, tbs[1], tbs[2])
    if fields and fields[0][0] == _CONTEXT_0:  # explicit version
        fields = fields[1:]
    if len(fields) < 5:
        raise CertificateError("certificate has no subject")
    subject = _expect(fields[4], _SEQUENCE)  # serialNumber, signature, issuer, validity, subject
    rdns = []
    for rdn in _children(cert_der, subject[1], subject[2]):
        _expect(rdn, _SET)
        rdns.append("+".join(_attribute(cert_der, ava) for ava in _children(cert_der, rdn[1], rdn[2])))
    return ",".join(reversed(rdns))


def _attribute(data: bytes, ava: tuple[int, int, int, int]) -> str:
    _expect(ava, _SEQUENCE)
    parts = _children(data, ava[1], ava[2])
    if len(parts) != 2:
        raise CertificateError("bad AttributeTypeAndValue")
    oid_element, value = _expect(parts[0], _OID), parts[1]
    oid = _oid(data[oid_element[1]:oid_element[2]])
    keyword = _KEYWORDS.get(oid)
    encoding = _STRING_TYPES.get(value[0])
    if keyword is None or encoding is None:
        return f"{keyword or oid}=#{data[value[3]:value[2]].hex()}"
    try:
        text = data[value[1]:value[2]].decode(encoding)
    except UnicodeDecodeError:
        raise CertificateError(f"bad {keyword} string") from None
    return f"{keyword}={_escape(text)}"


def _escape(text: str) -> str:
    """Java's AVA.toRFC2253String escaping: special characters anywhere, then spaces/CRs at either end."""
    chars = "".join("\\" + ch if ch in _ESCAPED else ch for ch in text)
    lead = len(chars) - len(chars.lstrip(" \r"))
    trail = len(chars.rstrip(" \r"))
    return "".join("\\" + ch if i < lead or i >= trail else ch for i, ch in enumerate(chars))
