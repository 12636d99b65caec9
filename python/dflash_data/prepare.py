"""`dflash-data prepare`: not written yet."""


def register(sub):
    p = sub.add_parser("prepare", help="(not written yet)")
    p.set_defaults(run=lambda args: 2)
