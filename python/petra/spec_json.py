"""Reading proto messages given as JSON dicts (petra.models.from_spec):
field names in snake_case or lowerCamel, enums by name, number or short
name, numbers as JSON numbers or strings, as protobuf's JSON parser takes
them."""

import math
import numbers


def is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def field(message, name, where):
    """A proto field of a JSON dict by its snake_case or lowerCamel name.

    `petra spec`, `petra status --json` and petra.Client.to_dict print
    proto field names (num_classes); protobuf's own JSON printer lowerCamel
    names (numClasses), and its parser takes both. null is absent, as for
    the parser.
    """
    values = [message[k] for k in dict.fromkeys((name, camel(name)))
              if k in message and message[k] is not None]
    if len(values) > 1 and values[0] != values[1]:
        raise ValueError(f"{where}{name}: given twice ({name!r} and "
                         f"{camel(name)!r}) with different values")
    return values[0] if values else None


def enum(value, prefix, names, field):
    """A proto enum from JSON: "PREFIX_NAME", its number, or a short name.

    Returns the short name, or None for the UNSPECIFIED value.
    """
    if is_int(value):
        if value == 0:
            return None
        if 1 <= value <= len(names):
            return names[value - 1]
    elif isinstance(value, str):
        text = value.strip().upper().replace("-", "_")
        if text in (prefix + "UNSPECIFIED", "UNSPECIFIED"):
            return None
        if text.startswith(prefix):
            text = text[len(prefix):]
        if text.lower() in names:
            return text.lower()
    raise ValueError(
        f"{field}: {value!r} is not one of "
        f"{', '.join(prefix + n.upper() for n in names)} (or their numbers "
        f"1-{len(names)}, or the short names {', '.join(names)})")


def number(value, field, integer):
    """A JSON number, or a string of one as the proto JSON parser accepts."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise ValueError(f"{field}: {value!r} is not "
                             f"{'an integer' if integer else 'a number'}") \
                from None
    if integer and is_real(value) and not is_int(value):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{field}: {value!r} is not an integer")
        value = int(value)
    if not is_real(value):
        raise ValueError(f"{field}: {value!r} is not a number")
    return value
