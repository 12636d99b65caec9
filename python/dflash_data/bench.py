"""`dflash-data bench`: not written yet."""


def register(sub):
    p = sub.add_parser("bench", help="(not written yet)")
    p.set_defaults(run=lambda args: 2)
