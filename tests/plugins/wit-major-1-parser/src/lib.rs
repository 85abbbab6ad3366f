//! A parser component built against `weir:plugin@1.0.0`. It exists to be refused: the host loads
//! another major version and must say so, naming both versions, before running anything.

wit_bindgen::generate!({ path: "wit", world: "parse-plugin" });

struct Echo;

impl exports::weir::plugin::parser::Guest for Echo {
    fn parse(input: Vec<u8>) -> Vec<u8> {
        input
    }
}

export!(Echo);
