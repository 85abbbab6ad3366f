"""What `weir.build` decides before it runs componentize-py: the module, its roles, the world."""

import tempfile
import types
import unittest
from pathlib import Path

import _paths

import weir
from weir import build
from weir.roles import ExportError, find_roles


def module(**classes):
    m = types.ModuleType("plugin_under_test")
    for name, cls in classes.items():
        cls.__module__ = m.__name__
        setattr(m, name, cls)
    return m


class P(weir.Parser):
    def parse(self, record, out):
        pass


class A(weir.Aggregator):
    def create(self):
        return 0

    add = merge = finish = lambda self, *a: None


class BuildTest(unittest.TestCase):
    def test_roles_follow_the_base_classes(self):
        self.assertEqual(find_roles(module(P=P)), {"parser": P})
        self.assertEqual(find_roles(module(P=P, A=A)), {"parser": P, "aggregator": A})

        class Both(weir.Parser, weir.Aggregator):
            parse = P.parse
            create, add, merge, finish = A.create, A.add, A.merge, A.finish

        self.assertEqual(find_roles(module(B=Both)), {"parser": Both, "aggregator": Both})

    def test_helper_base_classes_are_skipped_and_ambiguity_refused(self):
        class Base(weir.Parser):
            def parse(self, record, out):
                pass

        class Leaf(Base):
            pass

        class Other(weir.Parser):
            def parse(self, record, out):
                pass

        self.assertEqual(find_roles(module(Base=Base, Leaf=Leaf)), {"parser": Leaf})
        with self.assertRaisesRegex(ExportError, "several classes play the parser role"):
            find_roles(module(Leaf=Leaf, Other=Other))

    def test_a_role_without_its_methods_or_no_role_is_refused(self):
        class Half(weir.Aggregator):
            def add(self, acc, event):
                pass

        with self.assertRaisesRegex(ExportError, "does not define create, merge, finish"):
            find_roles(module(Half=Half))
        with self.assertRaisesRegex(ExportError, "defines no subclass"):
            find_roles(module())

    def test_one_role_is_its_world_several_the_plugin_world(self):
        self.assertEqual(build.world(["parser"]), "parse-plugin")
        self.assertEqual(build.world(["aggregator"]), "aggregate-plugin")
        self.assertEqual(build.world(["parser", "aggregator"]), "plugin")

    def test_the_app_module_names_the_classes_componentize_py_wants(self):
        src = build.app_source("orders_json", ["parser"])
        self.assertIn("import orders_json\n", src)
        self.assertIn("_made = exports(orders_json, every_role=False)\n", src)
        self.assertIn("Parser = _made['Parser']\n", src)
        self.assertNotIn("Aggregator", src)
        # The plugin world exports every interface: the roles not played answer unsupported.
        src = build.app_source("combo", ["parser", "aggregator"])
        for name in ["Parser", "Transformer", "Aggregator", "Sink"]:
            self.assertIn(f"{name} = _made[{name!r}]\n", src)

    def test_the_plugin_module_is_the_one_that_is_not_a_test(self):
        with tempfile.TemporaryDirectory() as d:
            for f in ["orders.py", "test_orders.py", "_helpers.py"]:
                Path(d, f).write_text("")
            self.assertEqual(build.find_module(Path(d)), "orders")
            Path(d, "other.py").write_text("")
            with self.assertRaisesRegex(build.BuildError, "found orders, other"):
                build.find_module(Path(d))
            self.assertEqual(build.find_module(Path(d), "other"), "other")

    def test_the_repository_wit_is_found_and_its_version_read(self):
        wit = build.find_wit()
        self.assertEqual(wit.resolve(), (_paths.REPO / "wit" / "plugin.wit").resolve())
        self.assertRegex(build.contract(wit), r"^\d+\.\d+\.\d+$")
        with tempfile.TemporaryDirectory() as d:
            other = Path(d, "plugin.wit")
            other.write_text("package acme:other@1.0.0;\n")
            with self.assertRaisesRegex(build.BuildError, "no `package weir:plugin@X.Y.Z;` line"):
                build.contract(other)

    def test_the_examples_play_their_roles(self):
        for d, role in [("orders-json-py", "parser"), ("error-rate-py", "aggregator"), ("fraud-alerts-py", "processor")]:
            src = _paths.REPO / "plugins" / d
            self.assertEqual(list(build.roles_of(src, build.find_module(src))), [role])


if __name__ == "__main__":
    unittest.main()
