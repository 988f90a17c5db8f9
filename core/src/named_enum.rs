//! One declaration for the enums whose variants are also names: the
//! simulator's coverage marks, the bug hunt's deliberate bugs, the buggify
//! sites. Each is printed, parsed and listed whole, so its list and its
//! names come from the one list of variants and cannot drift from it.

/// Declares a fieldless enum with `ALL` (every variant, in declaration
/// order, each at its own index), `name()` (the variant's name, as printed
/// and parsed) and `from_name`.
#[macro_export]
macro_rules! named_enum {
    (
        $(#[doc = $enum_doc:literal])*
        pub enum $enum:ident {
            $($(#[doc = $doc:literal])* $name:ident,)*
        }
    ) => {
        $(#[doc = $enum_doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $enum {
            $($(#[doc = $doc])* $name,)*
        }

        impl $enum {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$enum] = &[$($enum::$name,)*];

            /// The variant's name, as printed and parsed.
            pub fn name(self) -> &'static str {
                match self {
                    $($enum::$name => stringify!($name),)*
                }
            }

            /// The variant named `name`, if there is one.
            pub fn from_name(name: &str) -> Option<$enum> {
                Self::ALL.iter().copied().find(|v| v.name() == name)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::named_enum! {
        /// A test enum.
        pub enum Colour {
            /// The first.
            Red,
            Green,
        }
    }

    #[test]
    fn every_variant_is_listed_at_its_index_and_found_by_its_name() {
        for (i, c) in Colour::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(Colour::from_name(c.name()), Some(*c));
        }
        assert_eq!(Colour::ALL.len(), 2);
        assert_eq!(Colour::from_name("Blue"), None);
    }
}
