"""`dflash-data track`: not written yet."""


def register(sub):
    p = sub.add_parser("track", help="(not written yet)")
    p.set_defaults(run=lambda args: 2)
